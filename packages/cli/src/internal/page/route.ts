/**
 * How one route of the admin page runs: only at its own path exactly as mounted (the router
 * matches case and slashes loosely; a proxy's prefix rule must not be stepped around), then
 * through the security policy, then its handler; and what each section's routes are made from.
 */
import { printable } from "@effect-durable/core/Printable"
import type { DurableSettings } from "@effect-durable/pg/DurableConfig"
import type * as Feed from "@effect-durable/pg/Feed"
import type * as FlowControl from "@effect-durable/pg/FlowControl"
import type * as InboxAdmin from "@effect-durable/pg/InboxAdmin"
import type * as MutationLedger from "@effect-durable/pg/MutationLedger"
import type * as Outbox from "@effect-durable/pg/Outbox"
import type * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import type * as OutboxBulk from "@effect-durable/pg/OutboxBulk"
import type * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import * as OutboxStatements from "@effect-durable/pg/OutboxStatements"
import type * as Schedules from "@effect-durable/pg/Schedules"
import type * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import type * as WorkflowDeploys from "@effect-durable/workflow/WorkflowDeploys"
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Option from "effect/Option"
import type * as SqlClient from "effect/sql/SqlClient"
import { basePathOf, describe, exactlyAt, htmlResponse, jsonResponse, PageError, rawPath, reasonOf } from "./edge.js"
import type * as Jobs from "./jobs.js"
import type { makeQueries } from "./queries.js"
import { check, type Policy, secured } from "./security.js"
import * as Views from "./views.js"

export interface PageOptions {
  readonly policy: Policy
  readonly showPayloads: boolean
  readonly statementTimeout: Duration.Input
  readonly basePath: string | undefined
  readonly batchSize: number
}

type Kind = "health" | "read" | "write"

export interface Request {
  readonly request: HttpServerRequest.HttpServerRequest
  readonly url: URL
  readonly who: string
  readonly view: Views.ViewContext
}

type Queries = ReturnType<typeof makeQueries>

/** What the router gives every route's handler. */
type RouteRequirements = HttpServerRequest.HttpServerRequest | HttpRouter.RouteContext

/** What the page reads and acts through (`AdminPage.make` builds `OutboxSearch` and `OutboxBulk` itself). */
export type Requirements =
  | SqlClient.SqlClient
  | Outbox.Outbox
  | OutboxStatements.OutboxStatements
  | DurableSettings
  | OutboxAdmin.OutboxAdmin
  | InboxAdmin.InboxAdmin
  | MutationLedger.MutationLedger
  | OutboxSearch.OutboxSearch
  | OutboxBulk.OutboxBulk
  | Schedules.Schedules
  | FlowControl.FlowControl
  | Feed.Feed

/**
 * The runner of the page's routes, on `context` (the services the page was made with): the
 * policy first, then the handler; failures become a page or JSON.
 */
export const make = (options: PageOptions, context: Context.Context<Requirements>, queries: Queries) =>
<E>(
  kind: Kind,
  respond: "html" | "json",
  handler: (
    r: Request
  ) => Effect.Effect<HttpServerResponse.HttpServerResponse, E, Requirements | HttpServerRequest.HttpServerRequest>
): Effect.Effect<HttpServerResponse.HttpServerResponse, never, RouteRequirements> =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const original = rawPath(request.originalUrl)
    const { route: matched } = yield* HttpRouter.RouteContext
    if (!exactlyAt(matched.path, original)) {
      return HttpServerResponse.text("404 not found\n", { status: 404 })
    }
    const verdict = yield* check(options.policy, request, kind)
    if (verdict._tag === "Denied") {
      const response = respond === "json" || kind === "write"
        ? jsonResponse({ error: verdict.message }, verdict.status)
        : HttpServerResponse.text(`${verdict.status} ${verdict.message}\n`, { status: verdict.status })
      return verdict.challenge === undefined
        ? response
        : HttpServerResponse.setHeader(response, "www-authenticate", verdict.challenge)
    }
    const base = options.basePath ?? basePathOf(original, request)
    const version = kind === "health" || respond === "json"
      ? undefined
      : Option.getOrUndefined(yield* Effect.option(queries.version))
    const view: Views.ViewContext = {
      base,
      readOnly: options.policy.readOnly,
      showPayloads: options.showPayloads,
      who: verdict.who,
      version
    }
    const url = new URL(request.url, "http://page")
    return yield* handler({ request, url, who: verdict.who, view }).pipe(
      Effect.catchCause((cause) =>
        Effect.gen(function*() {
          const { message, status } = describe(cause)
          if (status === 500) {
            yield* Effect.logError(
              `effect-durable admin: ${request.method} ${printable(url.pathname)} failed: ${reasonOf(cause)}`,
              cause
            )
          }
          return respond === "json"
            ? jsonResponse({ error: message }, status)
            : htmlResponse(Views.errorPage(view, "Error", message), status)
        })
      )
    )
  }).pipe(Effect.map(secured), Effect.provideContext(context))

export type Route = ReturnType<typeof make>

/** What each section's routes are made from (the actions apart, made once from the same). */
export interface Page {
  readonly options: PageOptions
  readonly route: Route
  readonly queries: Queries
  readonly jobs: Effect.Success<typeof Jobs.make>
  readonly filterOf: (params: URLSearchParams) => Effect.Effect<OutboxSearch.MessageFilter, PageError>
  readonly workflows: WorkflowAdmin.WorkflowAdmin
  /** Runs by deploy version, for the workflows' page. */
  readonly deploys: WorkflowDeploys.WorkflowDeploys
}

export const get = (
  path: HttpRouter.PathInput,
  handler: Effect.Effect<HttpServerResponse.HttpServerResponse, never, RouteRequirements>
) => HttpRouter.route("GET", path, handler)
export const post = (
  path: HttpRouter.PathInput,
  handler: Effect.Effect<HttpServerResponse.HttpServerResponse, never, RouteRequirements>
) => HttpRouter.route("POST", path, handler)

/** The path's last `n` segments, decoded (`/messages/:id`); one that does not decode is a 400. */
export const lastSegments = (r: Request, n: number) =>
  Effect.try({
    try: () => r.url.pathname.split("/").slice(-n).map(decodeURIComponent),
    catch: () => new PageError({ status: 400, message: "the path is not valid percent-encoding" })
  })
export const lastSegment = (r: Request) => Effect.map(lastSegments(r, 1), ([segment]) => segment ?? "")

/**
 * The admin page's routes: the views (GET), the JSON the page's script reads, the actions
 * (same-origin JSON POSTs, bodies bounded in size and depth), the health endpoints and the two
 * assets. A route answers only at its own path exactly as mounted (the router matches case
 * and slashes loosely; a proxy's prefix rule must not be stepped around), then goes through
 * the security policy; every operator action is logged with who did it and from where (ids
 * and counts, never payloads; stored values escaped, so no line can be forged). A bad input
 * is a 4xx, a database that does not answer a 503.
 */
import { DatabaseError } from "@effect-durable/core/Errors"
import type { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as FlowControl from "@effect-durable/pg/FlowControl"
import type * as InboxAdmin from "@effect-durable/pg/InboxAdmin"
import type * as MutationLedger from "@effect-durable/pg/MutationLedger"
import type * as Outbox from "@effect-durable/pg/Outbox"
import type * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import type * as OutboxBulk from "@effect-durable/pg/OutboxBulk"
import type * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import * as Schedules from "@effect-durable/pg/Schedules"
import * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import * as Clock from "effect/Clock"
import type * as Context from "effect/Context"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as HttpMethod from "effect/http/HttpMethod"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import type * as SqlClient from "effect/sql/SqlClient"
import { printable } from "../printable.js"
import * as Actions from "./actions.js"
import * as Assets from "./assets.js"
import { type Sample, withSamples } from "./chart.js"
import { basePathOf, describe, exactlyAt, htmlResponse, jsonResponse, PageError, rawPath, reasonOf } from "./edge.js"
import * as Filters from "./filters.js"
import * as Jobs from "./jobs.js"
import * as LimitViews from "./limitViews.js"
import { HISTORY, makeQueries } from "./queries.js"
import * as ScheduleViews from "./scheduleViews.js"
import { check, type Policy, secured } from "./security.js"
import * as StoreViews from "./storeViews.js"
import * as Views from "./views.js"
import * as WorkflowViews from "./workflowViews.js"

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

/** What the router gives every route's handler. */
type RouteRequirements = HttpServerRequest.HttpServerRequest | HttpRouter.RouteContext

/** What the page reads and acts through (`AdminPage.make` builds `OutboxSearch` and `OutboxBulk` itself). */
export type Requirements =
  | SqlClient.SqlClient
  | Outbox.Outbox
  | DurableSettings
  | OutboxAdmin.OutboxAdmin
  | InboxAdmin.InboxAdmin
  | MutationLedger.MutationLedger
  | OutboxSearch.OutboxSearch
  | OutboxBulk.OutboxBulk
  | Schedules.Schedules
  | FlowControl.FlowControl

/**
 * The page's routes, unprefixed (`HttpRouter.addAll` puts them under a mount). Every handler
 * runs on `context` (the services the page was made with), in the scope of `make` for the
 * bulk actions it starts.
 */
export const make = Effect.fnUntraced(function*(
  options: PageOptions,
  context: Context.Context<Requirements>,
  workflows: WorkflowAdmin.WorkflowAdmin
) {
  const jobs = yield* Jobs.make
  const queries = makeQueries(options.statementTimeout)
  const samples = yield* Ref.make(new Map<string, ReadonlyArray<Sample>>())

  const record = (topics: ReadonlyArray<{ readonly topic: string; readonly ready: number; readonly dead: number }>) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) => Ref.update(samples, (map) => withSamples(map, topics, now)))

  /** Runs a route: the policy first, then the handler; failures become a page or JSON. */
  const route = <E>(
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

  /**
   * The message filter of a query string. With payloads hidden, a filter on their values would
   * tell them one guess at a time (one row for the right value, none for a wrong one): refused.
   */
  const filterOf = (params: URLSearchParams): Effect.Effect<OutboxSearch.MessageFilter, PageError> =>
    !options.showPayloads && params.getAll("payload").some((value) => value.trim() !== "")
      ? Effect.fail(
        new PageError({
          status: 400,
          message: "invalid filter.payload: payloads are hidden on this page, and so is the filter on them"
        })
      )
      : Effect.succeed(Filters.parse(params))

  const overviewData = Effect.gen(function*() {
    const data = yield* queries.overview
    yield* record(data.topics)
    return { data, samples: yield* Ref.get(samples) }
  })

  const {
    byIds,
    cancelAction,
    inboxLimitAction,
    limitAction,
    messageAction,
    scheduleAction,
    topicAction,
    workflowAction
  } = Actions
    .make({
      options,
      jobs,
      queries,
      filterOf,
      workflows
    })

  /** The path's last `n` segments, decoded (`/messages/:id`); one that does not decode is a 400. */
  const lastSegments = (r: Request, n: number) =>
    Effect.try({
      try: () => r.url.pathname.split("/").slice(-n).map(decodeURIComponent),
      catch: () => new PageError({ status: 400, message: "the path is not valid percent-encoding" })
    })
  const lastSegment = (r: Request) => Effect.map(lastSegments(r, 1), ([segment]) => segment ?? "")

  const refuseOther = (r: Request) =>
    Effect.succeed(
      r.request.method === "GET" || r.request.method === "HEAD"
        ? htmlResponse(Views.errorPage(r.view, "Not found", `no page at ${r.url.pathname}`), 404)
        : options.policy.readOnly
        ? jsonResponse({ error: "the admin page is read-only" }, 403)
        : jsonResponse({ error: `${r.request.method} ${r.url.pathname} is not an action of this page` }, 405)
    )

  const fallback = route(
    "read",
    "html",
    (r) =>
      r.url.pathname === "/" && (r.request.method === "GET" || r.request.method === "HEAD")
        ? Effect.map(
          overviewData,
          ({ data, samples }) => htmlResponse(Views.overviewPage(r.view, Views.overviewFragment(r.view, data, samples)))
        )
        : refuseOther(r)
  )

  const get = (
    path: HttpRouter.PathInput,
    handler: Effect.Effect<HttpServerResponse.HttpServerResponse, never, RouteRequirements>
  ) => HttpRouter.route("GET", path, handler)
  const post = (
    path: HttpRouter.PathInput,
    handler: Effect.Effect<HttpServerResponse.HttpServerResponse, never, RouteRequirements>
  ) => HttpRouter.route("POST", path, handler)

  return [
    get("/health/live", route("health", "json", () => Effect.succeed(jsonResponse({ status: "live" })))),
    get(
      "/health/ready",
      route("health", "json", () =>
        Effect.match(queries.version, {
          onFailure: () => jsonResponse({ status: "unavailable", reason: "database unreachable" }, 503),
          onSuccess: (v) =>
            v.version === v.latest
              ? jsonResponse({ status: "ready", version: v.version })
              : jsonResponse({
                status: "unavailable",
                reason: `schema at version ${v.version}, this release needs ${v.latest}`
              }, 503)
        }))
    ),
    get(
      "/assets/app.css",
      route(
        "read",
        "html",
        () => Effect.succeed(HttpServerResponse.text(Assets.css, { contentType: "text/css; charset=utf-8" }))
      )
    ),
    get(
      "/assets/app.js",
      route(
        "read",
        "html",
        () => Effect.succeed(HttpServerResponse.text(Assets.js, { contentType: "text/javascript; charset=utf-8" }))
      )
    ),
    get(
      "/fragments/overview",
      route(
        "read",
        "html",
        (r) =>
          Effect.map(overviewData, ({ data, samples }) => htmlResponse(Views.overviewFragment(r.view, data, samples)))
      )
    ),
    get(
      "/messages",
      route("read", "html", (r) =>
        Effect.gen(function*() {
          const before = r.url.searchParams.get("before") ?? undefined
          const result = yield* Effect.result(Effect.flatMap(
            filterOf(r.url.searchParams),
            (filter) => queries.messages(filter, { limit: 100, ...(before === undefined ? {} : { before }) })
          ))
          const data: Views.MessagesData = {
            params: r.url.searchParams,
            filterQuery: Filters.filterQuery(r.url.searchParams),
            page: result._tag === "Success" ? result.success[0] : undefined,
            count: result._tag === "Success" ? result.success[1] : undefined,
            error: result._tag === "Failure" ? result.failure.message : undefined
          }
          // A bad filter or a failed query is shown in place of the list, with the form to fix it.
          const status = result._tag === "Success" ? 200 : result.failure instanceof DatabaseError ? 503 : 400
          return htmlResponse(Views.messagesPage(r.view, data), status)
        }))
    ),
    get(
      "/messages/:id",
      route("read", "html", (r) =>
        Effect.gen(function*() {
          const id = yield* lastSegment(r)
          const found = yield* queries.message(id)
          return Option.isNone(found)
            ? htmlResponse(Views.errorPage(r.view, "Not found", `no outbox message ${id}`), 404)
            : htmlResponse(Views.messagePage(r.view, found.value))
        }))
    ),
    get(
      "/dead-letters",
      route("read", "html", (r) => {
        const topic = r.url.searchParams.get("topic") || undefined
        return Effect.map(queries.groups(topic), (groups) => htmlResponse(Views.deadLettersPage(r.view, groups, topic)))
      })
    ),
    get(
      "/inbox",
      route("read", "html", (r) => {
        const consumer = r.url.searchParams.get("consumer") || undefined
        return Effect.map(
          queries.inbox(consumer),
          (data) => htmlResponse(StoreViews.inboxPage(r.view, { ...data, consumer }))
        )
      })
    ),
    get(
      "/workflows",
      route("read", "html", (r) =>
        Effect.gen(function*() {
          const p = r.url.searchParams
          const workflow = p.get("workflow") || undefined
          const status = p.get("status") || undefined
          const listed = yield* Effect.result(
            queries.timed(
              workflows.list({ workflow, status: status as WorkflowAdmin.Status, limit: WorkflowViews.LIST_LIMIT })
            )
          )
          const data: WorkflowViews.ExecutionsData = {
            workflow,
            status: WorkflowAdmin.Statuses.find((s) => s === status),
            executions: listed._tag === "Success" ? listed.success : undefined,
            error: listed._tag === "Failure" ? listed.failure.message : undefined
          }
          // A bad filter is the request's fault; a database that does not answer is not.
          const code = listed._tag === "Success" ? 200 : listed.failure instanceof DatabaseError ? 503 : 400
          return htmlResponse(WorkflowViews.executionsPage(r.view, data), code)
        }))
    ),
    get(
      "/workflows/:workflow/:id",
      route("read", "html", (r) =>
        Effect.gen(function*() {
          const [workflow, executionId] = yield* lastSegments(r, 2)
          const found = yield* queries.timed(workflows.show(workflow!, executionId!))
          return found === undefined
            ? htmlResponse(
              Views.errorPage(r.view, "Not found", `no execution ${executionId} of workflow ${workflow}`),
              404
            )
            : htmlResponse(WorkflowViews.executionPage(r.view, found))
        }))
    ),
    get(
      "/schedules",
      route(
        "read",
        "html",
        (r) =>
          Effect.map(
            queries.timed(Effect.flatMap(Schedules.Schedules, (schedules) => schedules.list)),
            (list) => htmlResponse(ScheduleViews.schedulesPage(r.view, list))
          )
      )
    ),
    get(
      "/limits",
      route(
        "read",
        "html",
        (r) =>
          Effect.map(
            queries.timed(
              Effect.flatMap(FlowControl.FlowControl, (flow) => Effect.all([flow.limits, flow.inboxLimits]))
            ),
            ([topics, inbox]) => htmlResponse(LimitViews.limitsPage(r.view, topics, inbox))
          )
      )
    ),
    get(
      "/ledger",
      route("read", "html", (r) =>
        Effect.gen(function*() {
          const p = r.url.searchParams
          const subject = p.get("subject")
          const operation = p.get("operation")
          const key = p.get("key")
          if (subject === null || operation === null || key === null) {
            return htmlResponse(
              StoreViews.ledgerPage(r.view, { identity: undefined, record: undefined, error: undefined })
            )
          }
          const identity = { subject, operation, key }
          const found = yield* Effect.result(queries.ledger(identity))
          return htmlResponse(
            StoreViews.ledgerPage(r.view, {
              identity,
              record: found._tag === "Success" ? Option.getOrUndefined(found.success) : undefined,
              error: found._tag === "Failure" ? found.failure.message : undefined
            }),
            // A key that breaks a rule is the request's fault; a database that does not answer is not.
            found._tag === "Success" ? 200 : found.failure instanceof DatabaseError ? 503 : 400
          )
        }))
    ),
    // Version and pending migrations only: drift and the doctor's checks are actions below.
    get(
      "/schema",
      route(
        "read",
        "html",
        (r) => Effect.map(queries.schema, (data) => htmlResponse(StoreViews.schemaPage(r.view, data)))
      )
    ),
    get(
      "/api/stats",
      route(
        "read",
        "json",
        () =>
          Effect.map(queries.overview, (data) =>
            jsonResponse({
              topics: data.topics,
              consumers: data.consumers,
              history: Object.fromEntries(data.histories),
              window: HISTORY
            }))
      )
    ),
    get(
      "/api/count",
      route(
        "read",
        "json",
        (r) =>
          Effect.map(Effect.flatMap(filterOf(r.url.searchParams), queries.deadCount), (count) => jsonResponse(count))
      )
    ),
    get(
      "/api/jobs/:id",
      route(
        "read",
        "json",
        (r) =>
          Effect.map(
            Effect.flatMap(lastSegment(r), jobs.get),
            (job) => job === undefined ? jsonResponse({ error: "no such job" }, 404) : jsonResponse(job)
          )
      )
    ),
    post("/actions/redrive", route("write", "json", byIds("redrive", "outbox"))),
    post("/actions/discard", route("write", "json", byIds("discard", "outbox"))),
    post("/actions/retry-now", route("write", "json", messageAction("retryNow", "outbox"))),
    post("/actions/move-aside", route("write", "json", messageAction("moveAside", "outbox"))),
    post("/actions/cancel", route("write", "json", cancelAction("outbox"))),
    post("/actions/restore", route("write", "json", byIds("restore", "outbox"))),
    post("/actions/pause", route("write", "json", topicAction("pause"))),
    post("/actions/resume", route("write", "json", topicAction("resume"))),
    post("/schedules/actions/pause", route("write", "json", scheduleAction("pause"))),
    post("/schedules/actions/resume", route("write", "json", scheduleAction("resume"))),
    post("/limits/actions/set", route("write", "json", limitAction("set"))),
    post("/limits/actions/clear", route("write", "json", limitAction("clear"))),
    post("/limits/actions/inbox-set", route("write", "json", inboxLimitAction("set"))),
    post("/limits/actions/inbox-clear", route("write", "json", inboxLimitAction("clear"))),
    post("/workflows/actions/interrupt", route("write", "json", workflowAction("interrupt"))),
    post("/workflows/actions/resume", route("write", "json", workflowAction("resume"))),
    post("/inbox/actions/redrive", route("write", "json", byIds("redrive", "inbox"))),
    post("/inbox/actions/discard", route("write", "json", byIds("discard", "inbox"))),
    post("/inbox/actions/retry-now", route("write", "json", messageAction("retryNow", "inbox"))),
    post("/inbox/actions/move-aside", route("write", "json", messageAction("moveAside", "inbox"))),
    // They apply the migrations to a scratch schema (rolled back), or LISTEN and reserve
    // sessions: not for a read-only page, nor for another site's page to set off.
    post(
      "/schema/drift",
      route(
        "write",
        "json",
        (r) =>
          Effect.map(queries.drift, (drift) => jsonResponse({ html: StoreViews.driftFragment(r.view, drift).value }))
      )
    ),
    post(
      "/schema/checks",
      route(
        "write",
        "json",
        (r) =>
          Effect.map(
            queries.checks,
            (checks) => jsonResponse({ html: StoreViews.checksFragment(r.view, checks).value })
          )
      )
    ),
    // The overview, at the page's root; anything else: not found, or not an action (403 on a
    // read-only page: every write is refused). One wildcard route per method serves both: under
    // a prefix, the router gives "*" the prefix itself too, where a route of its own for "/"
    // would clash. None for HEAD, which the router answers from the GET routes.
    ...Array.from(HttpMethod.all).filter((method) => method !== "HEAD").map((method) =>
      HttpRouter.route(method, "*", fallback)
    )
  ]
})

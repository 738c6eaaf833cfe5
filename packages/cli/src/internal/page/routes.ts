/**
 * The admin page's routes, unprefixed: the health endpoints and the two assets, then each
 * section's routes (a module each, in the order of the page's navigation), the fallback last.
 */
import type * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import type * as WorkflowDeploys from "@effect-durable/workflow/WorkflowDeploys"
import type * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Actions from "./actions.js"
import * as Assets from "./assets.js"
import { jsonResponse } from "./edge.js"
import * as FeedRoutes from "./feedRoutes.js"
import * as Filters from "./filters.js"
import * as InboxRoutes from "./inboxRoutes.js"
import * as Jobs from "./jobs.js"
import * as LedgerRoutes from "./ledgerRoutes.js"
import * as LimitRoutes from "./limitRoutes.js"
import * as MessageRoutes from "./messageRoutes.js"
import * as MetricsRoutes from "./metricsRoutes.js"
import * as OverviewRoutes from "./overviewRoutes.js"
import { makeQueries } from "./queries.js"
import * as Route from "./route.js"
import * as ScheduleRoutes from "./scheduleRoutes.js"
import * as SchemaRoutes from "./schemaRoutes.js"
import * as WorkflowRoutes from "./workflowRoutes.js"

/**
 * The page's routes, unprefixed (`HttpRouter.addAll` puts them under a mount). Every handler
 * runs on `context` (the services the page was made with), in the scope of `make` for the
 * bulk actions it starts.
 */
export const make = Effect.fnUntraced(function*(
  options: Route.PageOptions,
  context: Context.Context<Route.Requirements>,
  workflows: WorkflowAdmin.WorkflowAdmin,
  deploys: WorkflowDeploys.WorkflowDeploys
) {
  const jobs = yield* Jobs.make
  const queries = makeQueries(options.statementTimeout)
  const route = Route.make(options, context, queries)
  const page: Route.Page = {
    options,
    route,
    queries,
    jobs,
    filterOf: Filters.ofQuery(options.showPayloads),
    workflows,
    deploys
  }
  const actions = Actions.make(page)
  const overview = yield* OverviewRoutes.make(page)

  return [
    Route.get("/health/live", route("health", "json", () => Effect.succeed(jsonResponse({ status: "live" })))),
    Route.get(
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
    Route.get(
      "/assets/app.css",
      route(
        "read",
        "html",
        () => Effect.succeed(HttpServerResponse.text(Assets.css, { contentType: "text/css; charset=utf-8" }))
      )
    ),
    Route.get(
      "/assets/app.js",
      route(
        "read",
        "html",
        () => Effect.succeed(HttpServerResponse.text(Assets.js, { contentType: "text/javascript; charset=utf-8" }))
      )
    ),
    ...MetricsRoutes.routes(page),
    ...overview.routes,
    ...MessageRoutes.routes(page, actions),
    ...InboxRoutes.routes(page, actions),
    ...WorkflowRoutes.routes(page, actions),
    ...ScheduleRoutes.routes(page, actions),
    ...FeedRoutes.routes(page),
    ...LimitRoutes.routes(page, actions),
    ...LedgerRoutes.routes(page),
    ...SchemaRoutes.routes(page),
    ...overview.fallback
  ]
})

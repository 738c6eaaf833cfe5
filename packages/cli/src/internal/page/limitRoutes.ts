/**
 * The flow limits' routes: the limited topics and stored-inbox consumers with what is in
 * flight, and set and clear of a topic's limits or a consumer's.
 */
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as Effect from "effect/Effect"
import type { Actions } from "./actions.js"
import { htmlResponse } from "./edge.js"
import * as LimitViews from "./limitViews.js"
import { get, type Page, post } from "./route.js"

export const routes = ({ queries, route }: Page, { inboxLimitAction, limitAction }: Actions) => [
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
  post("/limits/actions/set", route("write", "json", limitAction("set"))),
  post("/limits/actions/clear", route("write", "json", limitAction("clear"))),
  post("/limits/actions/inbox-set", route("write", "json", inboxLimitAction("set"))),
  post("/limits/actions/inbox-clear", route("write", "json", inboxLimitAction("clear")))
]

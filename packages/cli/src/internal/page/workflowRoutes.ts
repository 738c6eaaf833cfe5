/**
 * The workflows' routes: the latest executions (filtered by workflow and status; what they
 * wait on, the unfinished by deploy version), one
 * execution with its journal, and interrupt and resume of an execution.
 */
import { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import * as WorkflowAttributes from "@effect-durable/workflow/WorkflowAttributes"
import * as Effect from "effect/Effect"
import type { Actions } from "./actions.js"
import { htmlResponse } from "./edge.js"
import { get, lastSegments, type Page, post } from "./route.js"
import * as Views from "./views.js"
import * as WorkflowViews from "./workflowViews.js"

export const routes = ({ deploys, queries, route, workflows }: Page, { workflowAction }: Actions) => [
  get(
    "/workflows",
    route("read", "html", (r) =>
      Effect.gen(function*() {
        const p = r.url.searchParams
        const workflow = p.get("workflow") || undefined
        const status = p.get("status") || undefined
        const attribute = p.get("attribute") || undefined
        const attributes = attribute === undefined ? undefined : WorkflowAttributes.parseFilter(attribute)
        const listed = yield* Effect.result(
          attribute !== undefined && attributes === undefined
            ? Effect.fail(new InvalidInput({ argument: "attribute", rule: "name=value" }))
            : queries.timed(
              workflows.list({
                workflow,
                status: status as WorkflowAdmin.Status,
                attributes,
                limit: WorkflowViews.LIST_LIMIT
              })
            )
        )
        const waiting = listed._tag === "Success"
          ? yield* Effect.option(queries.timed(workflows.waiting({ workflow })))
          : undefined
        const versions = listed._tag === "Success"
          ? yield* Effect.option(queries.timed(deploys.versions({ workflow })))
          : undefined
        const data: WorkflowViews.ExecutionsData = {
          workflow,
          attribute,
          status: WorkflowAdmin.Statuses.find((s) => s === status),
          executions: listed._tag === "Success" ? listed.success : undefined,
          waiting: waiting?._tag === "Some" ? waiting.value : undefined,
          versions: versions?._tag === "Some" ? versions.value : undefined,
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
  post("/workflows/actions/interrupt", route("write", "json", workflowAction("interrupt"))),
  post("/workflows/actions/resume", route("write", "json", workflowAction("resume")))
]

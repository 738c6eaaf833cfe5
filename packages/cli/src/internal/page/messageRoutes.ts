/**
 * The outbox's routes: the messages (filtered, paged) and one message, the dead letters by
 * group with the count a bulk action confirms and the progress of the job it starts, and the
 * outbox's actions by ids or filter, with pause and resume of a topic.
 */
import { DatabaseError } from "@effect-durable/core/Errors"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { Actions } from "./actions.js"
import { htmlResponse, jsonResponse } from "./edge.js"
import * as Filters from "./filters.js"
import { get, lastSegment, type Page, post } from "./route.js"
import * as Views from "./views.js"

export const routes = (
  { filterOf, jobs, queries, route }: Page,
  { byIds, cancelAction, messageAction, topicAction }: Actions
) => [
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
    "/api/count",
    route(
      "read",
      "json",
      (r) => Effect.map(Effect.flatMap(filterOf(r.url.searchParams), queries.deadCount), (count) => jsonResponse(count))
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
  post("/actions/resume", route("write", "json", topicAction("resume")))
]

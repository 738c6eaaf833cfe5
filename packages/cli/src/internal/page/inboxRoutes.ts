/**
 * The stored inbox's routes: its consumers and their receipts (all, or one consumer's), and
 * the inbox's actions by ids (an inbox is acted on by ids only, never by filter).
 */
import * as Effect from "effect/Effect"
import type { Actions } from "./actions.js"
import { htmlResponse } from "./edge.js"
import { get, type Page, post } from "./route.js"
import * as StoreViews from "./storeViews.js"

export const routes = ({ queries, route }: Page, { byIds, messageAction }: Actions) => [
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
  post("/inbox/actions/redrive", route("write", "json", byIds("redrive", "inbox"))),
  post("/inbox/actions/discard", route("write", "json", byIds("discard", "inbox"))),
  post("/inbox/actions/retry-now", route("write", "json", messageAction("retryNow", "inbox"))),
  post("/inbox/actions/move-aside", route("write", "json", messageAction("moveAside", "inbox")))
]

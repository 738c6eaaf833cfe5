/** The feed's route: its consumers with their lag, and what holds the horizon back. */
import * as Feed from "@effect-durable/pg/Feed"
import * as Effect from "effect/Effect"
import { htmlResponse } from "./edge.js"
import * as FeedViews from "./feedViews.js"
import { get, type Page } from "./route.js"

export const routes = ({ queries, route }: Page) => [
  get(
    "/feeds",
    route(
      "read",
      "html",
      (r) =>
        Effect.map(
          queries.timed(Effect.flatMap(Feed.Feed, (feed) => Effect.all([feed.lag(), feed.holder]))),
          ([consumers, holder]) => htmlResponse(FeedViews.feedsPage(r.view, consumers, holder))
        )
    )
  )
]

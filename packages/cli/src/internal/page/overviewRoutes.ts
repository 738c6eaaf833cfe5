/**
 * The overview's routes: the page at the root, its fragment the script refreshes and the JSON
 * of its charts, with the samples the charts draw kept here between requests. The root route
 * also answers every path no other route takes: not found, or not an action of the page.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as HttpMethod from "effect/http/HttpMethod"
import * as HttpRouter from "effect/http/HttpRouter"
import * as Ref from "effect/Ref"
import { type Sample, withSamples } from "./chart.js"
import { htmlResponse, jsonResponse } from "./edge.js"
import { HISTORY } from "./queries.js"
import { get, type Page, type Request } from "./route.js"
import * as Views from "./views.js"

export const make = Effect.fnUntraced(function*({ options, queries, route }: Page) {
  const samples = yield* Ref.make(new Map<string, ReadonlyArray<Sample>>())

  const record = (topics: ReadonlyArray<{ readonly topic: string; readonly ready: number; readonly dead: number }>) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) => Ref.update(samples, (map) => withSamples(map, topics, now)))

  const overviewData = Effect.gen(function*() {
    const data = yield* queries.overview
    yield* record(data.topics)
    return { data, samples: yield* Ref.get(samples) }
  })

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

  return {
    routes: [
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
      )
    ],
    // The overview, at the page's root; anything else: not found, or not an action (403 on a
    // read-only page: every write is refused). One wildcard route per method serves both: under
    // a prefix, the router gives "*" the prefix itself too, where a route of its own for "/"
    // would clash. None for HEAD, which the router answers from the GET routes. Mounted last.
    fallback: Array.from(HttpMethod.all).filter((method) => method !== "HEAD").map((method) =>
      HttpRouter.route(method, "*", fallback)
    )
  }
})

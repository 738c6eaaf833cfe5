/**
 * The schema's routes: its version and pending migrations on the page, then drift and the
 * doctor's checks on demand, each a fragment the page's script puts in place.
 */
import * as Effect from "effect/Effect"
import { htmlResponse, jsonResponse } from "./edge.js"
import { get, type Page, post } from "./route.js"
import * as StoreViews from "./storeViews.js"

export const routes = ({ queries, route }: Page) => [
  // Version and pending migrations only: drift and the doctor's checks are actions below.
  get(
    "/schema",
    route(
      "read",
      "html",
      (r) => Effect.map(queries.schema, (data) => htmlResponse(StoreViews.schemaPage(r.view, data)))
    )
  ),
  // They apply the migrations to a scratch schema (rolled back), or LISTEN and reserve
  // sessions: not for a read-only page, nor for another site's page to set off.
  post(
    "/schema/drift",
    route(
      "write",
      "json",
      (r) => Effect.map(queries.drift, (drift) => jsonResponse({ html: StoreViews.driftFragment(r.view, drift).value }))
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
  )
]

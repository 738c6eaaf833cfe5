/**
 * The mutation ledger's route: the record of one key (subject, operation, key), looked up
 * only when all three are given; a key that breaks a rule is shown in place of the record.
 */
import { DatabaseError } from "@effect-durable/core/Errors"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { htmlResponse } from "./edge.js"
import { get, type Page } from "./route.js"
import * as StoreViews from "./storeViews.js"

export const routes = ({ queries, route }: Page) => [
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
  )
]

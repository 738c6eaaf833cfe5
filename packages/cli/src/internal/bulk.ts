/**
 * A bulk redrive or discard held to what the operator confirmed: the dead messages matching a
 * filter, newest first from the newest id that was counted (`upTo`) down, never more than the
 * count confirmed, in batches that each commit. A message that dies meanwhile below `upTo` can
 * take the place of one that left the set, but the total never passes the confirmed count, and
 * no message is acted on twice (the walk goes down by id, once).
 */
import type { DatabaseError, InvalidInput } from "@effect-durable/core/Errors"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import * as Effect from "effect/Effect"
import type * as SqlClient from "effect/sql/SqlClient"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import { MAX_MESSAGE_ID } from "./ids.js"

/** The ids a page of `OutboxSearch.messages` may hold. */
const PAGE = 1000

type Requirements = OutboxSearch.OutboxSearch | OutboxAdmin.OutboxAdmin | SqlClient.SqlClient

export interface HeldOptions {
  readonly verb: "redrive" | "discard"
  /** Dead ones only are acted on, whatever the filter's state says. */
  readonly filter: OutboxSearch.MessageFilter
  /** The newest id counted; nothing newer is touched. */
  readonly upTo: string
  /** The count confirmed: at most this many are acted on. */
  readonly expected: number
  readonly batchSize: number
  /** How each batch runs (its transaction, its timeouts). */
  readonly batch: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | InvalidInput | DatabaseError, R | SqlClient.SqlClient>
}

/** After each committed batch, its ids and the total so far (`OutboxSearch.BulkProgress`). */
export const held = (
  options: HeldOptions
): Stream.Stream<OutboxSearch.BulkProgress, InvalidInput | DatabaseError, Requirements> => {
  const filter: OutboxSearch.MessageFilter = { ...options.filter, state: "dead" }
  const top = BigInt(options.upTo)
  const first = top >= MAX_MESSAGE_ID ? undefined : (top + 1n).toString()
  interface Cursor {
    readonly before: string | undefined
    readonly total: number
  }
  const step = (cursor: Cursor) =>
    options.batch(Effect.gen(function*() {
      const search = yield* OutboxSearch.OutboxSearch
      const admin = yield* OutboxAdmin.OutboxAdmin
      const size = Math.min(options.batchSize, options.expected - cursor.total)
      const ids: Array<string> = []
      let before = cursor.before
      let more = true
      while (more && ids.length < size) {
        const page = yield* search.messages(filter, { limit: Math.min(PAGE, size - ids.length), ...(before === undefined ? {} : { before }) })
        for (const m of page.items) ids.push(m.id)
        before = page.next
        more = page.next !== undefined
      }
      const applied = ids.length === 0 ? [] : yield* admin[options.verb](ids)
      const total = cursor.total + applied.length
      const next: Option.Option<Cursor> = more && before !== undefined && total < options.expected
        ? Option.some({ before, total })
        : Option.none()
      return [[{ ids: applied, total }], next] as const
    }))
  return Stream.paginate<Cursor, OutboxSearch.BulkProgress, InvalidInput | DatabaseError, Requirements>(
    { before: first, total: 0 },
    step
  )
}

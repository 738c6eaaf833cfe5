/**
 * The published retention of idempotency records: at least 24 hours. Every hour the records
 * older than that are purged (in batches; a request in flight is never touched); until then
 * an exact retry replays, after it the key is new.
 */
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"

export const RETENTION = "24 hours"

export const RetentionLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const ledger = yield* MutationLedger.MutationLedger
    yield* ledger.purge({ olderThan: RETENTION }).pipe(
      Effect.tap((purged) =>
        purged > 0 ? Effect.logInfo(`purged ${purged} idempotency records older than ${RETENTION}`) : Effect.void
      ),
      Effect.catch((error) => Effect.logWarning(`purging idempotency records failed: ${error.message}`)),
      Effect.repeat(Schedule.spaced("1 hour")),
      Effect.forkScoped
    )
  })
)

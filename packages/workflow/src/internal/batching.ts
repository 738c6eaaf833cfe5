/**
 * One statement for the calls of the same kind asked in the same tick: the runs a claimed batch
 * delivers begin, read and record at once, so their calls of each kind share a round trip (a
 * statement per call cost a socket write each, the bulk of a run's CPU). Each call still answers
 * only once its statement has committed, as a statement of its own would; a batch of one is that
 * statement. A call in a caller's transaction is not batched: it runs on that transaction's
 * connection. A call alone in its batch runs the single-row statement, quicker than the batch's
 * over arrays; the batch's tick still costs it about 0.1 ms.
 */
import type { DatabaseError } from "@effect-durable/core/Errors"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Request from "effect/Request"
import * as RequestResolver from "effect/RequestResolver"
import * as Result from "effect/Result"

interface Call<I, A> extends Request.Request<A, DatabaseError> {
  readonly _tag: "WorkflowStoreCall"
  readonly input: I
  readonly key: string
}

/** The most calls one statement carries. */
const BATCH = 500

/**
 * `many` answers the inputs of one batch by key (distinct keys: a key asked twice in a batch is
 * asked again in a batch after it, so the second call sees the first's effect, as in sequence);
 * a key it does not answer gets `missing`.
 */
export const batched = <I, A>(options: {
  readonly key: (input: I) => string
  /** A call alone (in the caller's transaction, or the only one of its tick): its own statement. */
  readonly one: (input: I) => Effect.Effect<A, DatabaseError>
  readonly many: (inputs: ReadonlyArray<I>) => Effect.Effect<ReadonlyMap<string, A>, DatabaseError>
  readonly missing: A
  readonly inTransaction: Effect.Effect<boolean>
}): (input: I) => Effect.Effect<A, DatabaseError> => {
  const Call = Request.tagged<Call<I, A>>("WorkflowStoreCall")
  const resolver = RequestResolver.batchN(
    RequestResolver.make<Call<I, A>>((entries) =>
      Effect.gen(function*() {
        let left: ReadonlyArray<Request.Entry<Call<I, A>>> = entries
        while (left.length > 0) {
          const round = new Map<string, Request.Entry<Call<I, A>>>()
          const later: Array<Request.Entry<Call<I, A>>> = []
          for (const entry of left) {
            if (round.has(entry.request.key)) later.push(entry)
            else round.set(entry.request.key, entry)
          }
          if (round.size === 1) {
            // The statement of one call is simpler, and so quicker, than the batch's over arrays.
            const [entry] = round.values()
            entry!.completeUnsafe(Exit.succeed(yield* options.one(entry!.request.input)))
          } else {
            const answers = yield* Effect.result(options.many([...round.values()].map((entry) => entry.request.input)))
            if (Result.isSuccess(answers)) {
              for (const [key, entry] of round) {
                entry.completeUnsafe(Exit.succeed(answers.success.get(key) ?? options.missing))
              }
            } else {
              // The statement wrote nothing (it is one): each call on its own, so that what one
              // call's data makes fail (a value the column refuses) fails that call only.
              yield* Effect.forEach(
                round.values(),
                (entry) =>
                  Effect.map(Effect.exit(options.one(entry.request.input)), (exit) => entry.completeUnsafe(exit)),
                { discard: true }
              )
            }
          }
          left = later
        }
      })
    ),
    BATCH
  )
  return (input) =>
    Effect.flatMap(options.inTransaction, (inTransaction) => {
      return inTransaction ? options.one(input) : Effect.request(Call({ input, key: options.key(input) }), resolver)
    })
}

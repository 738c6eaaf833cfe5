/**
 * Bulk actions of the admin page ("redrive all 40,000 matching"), run on the server: each is
 * a fiber in the page's scope that applies committed batches and records its progress here,
 * so the browser only polls. Closing the scope (the server stopping) interrupts them between
 * or during a batch: what is done is whole batches, the rest untouched.
 */
import { printable } from "@effect-durable/core/Printable"
import type * as OutboxBulk from "@effect-durable/pg/OutboxBulk"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as FiberSet from "effect/FiberSet"
import * as Ref from "effect/Ref"
import * as Stream from "effect/Stream"
import { randomBytes } from "node:crypto"

export interface Job {
  readonly id: string
  readonly action: string
  readonly who: string
  readonly total: number
  readonly done: number
  readonly state: "running" | "done" | "failed" | "interrupted"
  readonly error?: string
  readonly startedAt: string
}

const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error))

/** Jobs kept for polling after they end. */
const KEEP = 50

export const make = Effect.gen(function*() {
  const jobs = yield* Ref.make(new Map<string, Job>())
  const fibers = yield* FiberSet.make()
  const update = (id: string, change: (job: Job) => Job) =>
    Ref.update(jobs, (map) => {
      const job = map.get(id)
      if (job === undefined) return map
      const next = new Map(map)
      next.set(id, change(job))
      return next
    })

  const start = Effect.fnUntraced(function*<E>(
    action: string,
    who: string,
    total: number,
    stream: Stream.Stream<OutboxBulk.BulkProgress, E>
  ) {
    const id = randomBytes(8).toString("hex")
    const startedAt = new Date(yield* Clock.currentTimeMillis).toISOString()
    const job: Job = { id, action, who, total, done: 0, state: "running", startedAt }
    yield* Ref.update(jobs, (map) => {
      const next = new Map([...map].slice(-(KEEP - 1)))
      next.set(id, job)
      return next
    })
    const doneSoFar = Effect.map(Ref.get(jobs), (map) => map.get(id)?.done ?? 0)
    const run = Stream.runForEach(stream, (progress) => update(id, (j) => ({ ...j, done: progress.total }))).pipe(
      Effect.andThen(update(id, (j) => ({ ...j, state: "done" }))),
      Effect.andThen(doneSoFar),
      Effect.flatMap((done) =>
        Effect.logInfo(
          `effect-durable admin: ${printable(action)} by ${printable(who)} finished: ${done} of ${total} (job ${id})`
        ).pipe(
          Effect.annotateLogs({ who, job: id })
        )
      ),
      Effect.catchCause((cause) => {
        if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause)
        const reason = messageOf(Cause.squash(cause))
        return Effect.gen(function*() {
          yield* update(id, (j) => ({ ...j, state: "failed", error: reason }))
          const done = yield* doneSoFar
          // The reason in the line itself: a logger that prints messages only still says why.
          yield* Effect.logWarning(
            `effect-durable admin: ${printable(action)} by ${
              printable(who)
            } failed after ${done} of ${total} (job ${id}): ${printable(reason)}`,
            cause
          ).pipe(Effect.annotateLogs({ who, job: id, reason }))
        })
      }),
      Effect.onInterrupt(() => update(id, (j) => ({ ...j, state: "interrupted" })))
    )
    yield* FiberSet.run(fibers, run)
    return id
  })

  const get = (id: string) => Effect.map(Ref.get(jobs), (map) => map.get(id))
  return { start, get }
})

export type Jobs = Effect.Success<typeof make>

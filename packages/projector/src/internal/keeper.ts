/**
 * The keeper: one fiber per projector, not two per batch. A few times per delivery timeout
 * it cuts the publishes past their deadline (check and interruption in one synchronous step,
 * so a lane cannot move on between them). Every third of the lease it renews the leases of
 * each batch's unsettled messages (counted from when the batch's claim was sent: a claim that
 * came back late is renewed at once) — one fenced statement per batch, on a connection of the
 * keeper's own when it has one, so busy handlers cannot starve it — in a fiber of its own so
 * that a stalled database cannot hold up the deadlines. A claim a renewal finds stale is
 * never published (if not started) and its outcome never written; a renewal that fails puts
 * the whole batch's leases in doubt, and its messages not yet started are not published. So
 * does one still unanswered two renewal periods after it was sent (a stalled connection, a lock
 * wait no timeout bounds), which is then given up; meanwhile a message starts only while its
 * lease surely holds (Delivery.mayStart), whenever its claim came back.
 * Both are logged and counted. A renewal refused because the message was cancelled stops its
 * delivery (a cancellation whose NOTIFY was not heard). A batch leaves the set when it ends, however it ends: nothing
 * keeps its leases alive after that.
 */
import { printable } from "@effect-durable/core/Printable"
import type * as OutboxWorker from "@effect-durable/pg/OutboxWorker"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import type * as Fiber from "effect/Fiber"
import * as Metric from "effect/Metric"
import type { Delivery } from "./delivery.js"
import type { Settings } from "./options.js"
import { metrics } from "./telemetry.js"

export const makeKeeper = (settings: Settings, outbox: OutboxWorker.OutboxWorker["Service"]) => {
  const deliveries = new Set<Delivery>()
  const renewEvery = Duration.toMillis(settings.renewEvery)
  // Unanswered when the leases it renews would lapse (two renewals late): given up.
  const renewalDeadline = Duration.times(settings.renewEvery, 2)

  const renew = (delivery: Delivery) => {
    const claims = delivery.leases()
    if (claims.length === 0) return Effect.void
    return Effect.flatMap(Clock.currentTimeMillis, (sentAt) =>
      outbox.renewLeases(claims, settings.lease).pipe(
        Effect.timeoutOrElse({
          duration: renewalDeadline,
          orElse: () => Effect.fail(new Error(`no answer in ${Duration.format(renewalDeadline)}`))
        }),
        Effect.flatMap(({ rejected: refused }) => {
          delivery.renewed(sentAt)
          if (refused.length === 0) return Effect.void
          // A cancelled message found here (its NOTIFY not heard: sent while the LISTEN was
          // down) is stopped as the notification would have stopped it.
          const wasCancelled = (failure: (typeof refused)[number]) =>
            failure._tag === "ClaimMismatch" && failure.cancelled === true
          const cancelled = refused.filter(wasCancelled)
          for (const failure of cancelled) delivery.cancel(failure.messageId)
          const lost = refused.filter((failure) => !wasCancelled(failure))
          delivery.lost(lost.map((failure) => failure.messageId))
          // One line per message (its topic and id, never its payload), counted.
          return Effect.andThen(
            Effect.andThen(
              Metric.update(metrics.leasesLost, lost.length),
              Effect.forEach(cancelled, (failure) =>
                Effect.logInfo(
                  `effect-durable projector: message ${failure.messageId} was cancelled while delivered (found at its lease renewal); its delivery is stopped`
                ), { discard: true })
            ),
            Effect.forEach(lost, (failure) => {
              const message = delivery.message(failure.messageId)
              return Effect.logWarning(
                `effect-durable projector: lease lost on message ${failure.messageId}${
                  message === undefined ? "" : ` of topic ${printable(message.topic)}`
                } before its renewal (a stall longer than the lease?): it is left to its new holder, its outcome not written`
              ).pipe(Effect.annotateLogs({
                messageId: failure.messageId,
                ...(message === undefined ? {} : { topic: message.topic, attempt: message.attempt })
              }))
            }, { discard: true })
          )
        }),
        Effect.catch((error) =>
          Effect.andThen(
            Effect.sync(() => delivery.doubt()),
            Effect.andThen(
              Metric.update(metrics.renewalFailures, 1),
              Effect.logWarning(
                `effect-durable projector: lease renewal failed (${
                  printable(error.message)
                }); the batch's messages not yet started are given back`
              )
            )
          )
        )
      ))
  }

  const run = Effect.withFiber<void>((self) => {
    let renewing: Fiber.Fiber<void> | undefined
    const tick = Effect.flatMap(Clock.currentTimeMillis, (now) => {
      const due: Array<Delivery> = []
      const busy = renewing !== undefined && renewing.pollUnsafe() === undefined
      for (const delivery of deliveries) {
        delivery.cutOverdue(now, self.id)
        // A renewal still running: the next tick asks again.
        if (!busy && delivery.renewalDue(now)) due.push(delivery)
      }
      if (due.length === 0) return Effect.void
      return Effect.map(
        Effect.forkChild(Effect.forEach(due, renew, { discard: true })),
        (fiber) => void (renewing = fiber)
      )
    })
    // Often enough for both: a deadline is cut within a quarter of the timeout, a lease
    // renewed within half of its third.
    const every = Math.max(10, Math.min(1000, Duration.toMillis(settings.deliveryTimeout) / 4, renewEvery / 2))
    // With no batch to watch it waits for one instead of ticking: an idle projector does no
    // work, and a TestClock moved a week does not run 600,000 empty ticks.
    return Effect.forever(Effect.andThen(untilWatching, Effect.andThen(tick, Effect.sleep(Duration.millis(every)))))
  })

  /** Woken by the first batch watched while there was none. */
  let idle: Deferred.Deferred<void> | undefined
  const untilWatching = Effect.suspend(() => {
    if (deliveries.size > 0) return Effect.void
    idle ??= Deferred.makeUnsafe<void>()
    return Deferred.await(idle)
  })

  /** Runs `use` with the batch watched by the keeper, and forgets the batch when it ends. */
  const watching = <A, E, R>(delivery: Delivery, use: Effect.Effect<A, E, R>) =>
    Effect.acquireUseRelease(
      Effect.sync(() => {
        deliveries.add(delivery)
        if (idle !== undefined) Deferred.doneUnsafe(idle, Effect.void)
        idle = undefined
      }),
      () => use,
      () => Effect.sync(() => deliveries.delete(delivery))
    )

  /**
   * Renews every batch at the next tick. The cancel channel's LISTEN calls it each time it is
   * (re)established: a cancellation sent while it was down is found by the renewal (its row
   * refuses the lease) and stopped then, not at the next regular renewal.
   */
  const renewSoon = () => {
    for (const delivery of deliveries) delivery.renewSoon()
  }

  return { run, watching, renewSoon }
}

/**
 * The projector: a fiber that claims outbox messages and delivers them through the
 * `Publisher`, at least once. It holds no row lock while delivering (the claim is a lease,
 * renewed for slow deliveries), never settles a message with a stale claim, delivers the
 * messages of one ordering key one at a time in id order, and wakes on the outbox's NOTIFY
 * as well as on a poll interval (so it also works through a pooler that carries no NOTIFY).
 * Closing its scope stops claiming, lets in-flight deliveries finish within the shutdown
 * deadline and releases whatever is left, so another worker takes it at once.
 *
 * @since 0.1.0
 */
import { type DatabaseError, DurableConfigError } from "@effect-durable/core/Errors"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Cause from "effect/Cause"
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberRef from "effect/FiberRef"
import * as Layer from "effect/Layer"
import * as Metric from "effect/Metric"
import * as MetricBoundaries from "effect/MetricBoundaries"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Random from "effect/Random"
import * as Ref from "effect/Ref"
import * as Schema from "effect/Schema"
import * as Tracer from "effect/Tracer"
import { randomBytes } from "node:crypto"
import { hostname } from "node:os"
import { listen } from "./internal/listener.js"
import { permanent, type Publish, Publisher, PublishError, retryable } from "./Publisher.js"

export interface ProjectorOptions {
  /** Topics to deliver; default all. */
  readonly topics?: ReadonlyArray<string>
  /** Worker id stored with each claim; default host:pid:random. */
  readonly workerId?: string
  /**
   * Messages per claim. Default 500: a claim and a mark cost about the same for 100 rows as
   * for 500, so larger batches spend less per message (measured by `npm run bench`).
   */
  readonly batchSize?: number
  /** Deliveries in flight at once, across all batches in flight. Default 16. */
  readonly concurrency?: number
  /**
   * Batches in flight at once: while one batch is delivered and marked, the next is already
   * claimed, so the database's round trips overlap the delivery work. Per-key order holds
   * (a key's next message is not claimable while an earlier one is open). Default 3.
   */
  readonly batchesInFlight?: number
  /** Lease of a claim; renewed every third of it while a delivery runs. Default 30 s. */
  readonly lease?: Duration.DurationInput
  /** Longest sleep between claims when no NOTIFY arrives. Default 1 s. */
  readonly pollInterval?: Duration.DurationInput
  /** Retry delay: exponential in the attempt with full jitter, between min and max. Default 1 s – 5 min. */
  readonly backoff?: { readonly min?: Duration.DurationInput; readonly max?: Duration.DurationInput }
  /** A delivery taking longer fails retryable. Default 10 s. */
  readonly deliveryTimeout?: Duration.DurationInput
  /** How long closing waits for in-flight deliveries before releasing them. Default 10 s. */
  readonly shutdownDeadline?: Duration.DurationInput
  /** Payload schemas by topic: a payload that does not decode goes to the dead letters at once. */
  readonly schemas?: Readonly<Record<string, Schema.Schema<any, any, never>>>
}

interface Resolved {
  readonly topics: ReadonlyArray<string> | undefined
  readonly workerId: string
  readonly batchSize: number
  readonly concurrency: number
  readonly batchesInFlight: number
  readonly lease: Duration.Duration
  readonly pollInterval: Duration.Duration
  readonly backoffMin: Duration.Duration
  readonly backoffMax: Duration.Duration
  readonly deliveryTimeout: Duration.Duration
  readonly shutdownDeadline: Duration.Duration
  readonly schemas: Readonly<Record<string, Schema.Schema<any, any, never>>>
}

/** What one run delivered. */
export interface Counts {
  readonly claimed: number
  readonly delivered: number
  readonly retried: number
  readonly dead: number
  /** Deliveries whose claim went stale (lease lost): never marked, counted here. */
  readonly stale: number
}

const invalid = (field: string, rule: string) => Effect.fail(new DurableConfigError({ field, rule }))
const positive = (field: string, input: Duration.DurationInput | undefined) => {
  if (input === undefined) return Effect.void
  const decoded = Duration.decodeUnknown(input)
  return (typeof input === "number" && input <= 0) || Option.isNone(decoded) || !Duration.isFinite(decoded.value) ||
      Duration.lessThanOrEqualTo(decoded.value, Duration.zero)
    ? invalid(field, "a finite duration greater than zero")
    : Effect.void
}
const count = (field: string, value: number | undefined, max: number) =>
  value === undefined || (Number.isInteger(value) && value >= 1 && value <= max)
    ? Effect.void
    : invalid(field, `an integer from 1 to ${max}`)

/** Checks every option; a bad one is a `DurableConfigError` naming it. */
export const validateOptions = (options: ProjectorOptions): Effect.Effect<Resolved, DurableConfigError> =>
  Effect.gen(function*() {
    yield* count("batchSize", options.batchSize, 1000)
    yield* count("concurrency", options.concurrency, 1000)
    yield* count("batchesInFlight", options.batchesInFlight, 64)
    for (const [field, value] of [
      ["lease", options.lease],
      ["pollInterval", options.pollInterval],
      ["backoff.min", options.backoff?.min],
      ["backoff.max", options.backoff?.max],
      ["deliveryTimeout", options.deliveryTimeout],
      ["shutdownDeadline", options.shutdownDeadline]
    ] as const) yield* positive(field, value)
    if (options.workerId !== undefined && !/^[\x21-\x7e]{1,128}$/.test(options.workerId)) {
      return yield* invalid("workerId", "1-128 printable ASCII characters without spaces")
    }
    if (options.topics !== undefined && (options.topics.length === 0 || options.topics.some((t) => t.length === 0))) {
      return yield* invalid("topics", "a non-empty list of non-empty topics")
    }
    const resolved = resolve(options)
    if (Duration.greaterThan(resolved.backoffMin, resolved.backoffMax)) {
      return yield* invalid("backoff", "min must not exceed max")
    }
    return resolved
  })

const resolve = (options: ProjectorOptions): Resolved => ({
  topics: options.topics,
  workerId: options.workerId ?? `${hostname()}:${process.pid}:${randomBytes(3).toString("hex")}`,
  batchSize: options.batchSize ?? 500,
  concurrency: options.concurrency ?? 16,
  batchesInFlight: options.batchesInFlight ?? 3,
  lease: Duration.decode(options.lease ?? "30 seconds"),
  pollInterval: Duration.decode(options.pollInterval ?? "1 second"),
  backoffMin: Duration.decode(options.backoff?.min ?? "1 second"),
  backoffMax: Duration.decode(options.backoff?.max ?? "5 minutes"),
  deliveryTimeout: Duration.decode(options.deliveryTimeout ?? "10 seconds"),
  shutdownDeadline: Duration.decode(options.shutdownDeadline ?? "10 seconds"),
  schemas: options.schemas ?? {}
})

/** Effect metrics of the projector, tagged by topic where a message is concerned. */
export const metrics = {
  claimed: Metric.counter("effect_durable_projector_claimed_total", { description: "messages claimed" }),
  delivered: Metric.counter("effect_durable_projector_delivered_total", { description: "messages delivered and marked" }),
  retried: Metric.counter("effect_durable_projector_retried_total", { description: "deliveries released for a retry" }),
  dead: Metric.counter("effect_durable_projector_dead_total", { description: "messages sent to the dead letters" }),
  stale: Metric.counter("effect_durable_projector_stale_total", { description: "deliveries whose claim went stale" }),
  batchSize: Metric.histogram(
    "effect_durable_projector_batch_size",
    MetricBoundaries.fromIterable([1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]),
    "messages per claim"
  ),
  lag: Metric.histogram(
    "effect_durable_projector_lag_seconds",
    MetricBoundaries.exponential({ start: 0.001, factor: 2, count: 20 }),
    "enqueue to delivery, seconds"
  )
}

// Tagging a metric builds a new key; the projector tags per topic, so it keeps them.
const tagged = new WeakMap<object, Map<string, any>>()
const forTopic = <M extends Metric.Metric<any, any, any>>(metric: M, topic: string): M => {
  let byTopic = tagged.get(metric)
  if (byTopic === undefined) tagged.set(metric, byTopic = new Map())
  let found = byTopic.get(topic)
  if (found === undefined) byTopic.set(topic, found = Metric.tagged(metric, "topic", topic))
  return found
}

/** Effect's built-in tracer, which records nothing: spans are skipped while it is the one in use. */
const nativeTracer = Effect.runSync(Effect.tracer)

/** A `timestamptz` as PostgreSQL prints it (`2026-11-29 18:00:00.123+00`), in epoch milliseconds. */
const parseTimestamp = (text: string) => Date.parse(text.replace(" ", "T").replace(/([+-]\d\d)$/, "$1:00"))

/** The span a producer was in when it enqueued, from the stored W3C `traceparent`. */
const producerSpan = (headers: Readonly<Record<string, string>>): Option.Option<Tracer.ExternalSpan> => {
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(headers.traceparent ?? "")
  return match === null
    ? Option.none()
    : Option.some(Tracer.externalSpan({ traceId: match[1]!, spanId: match[2]!, sampled: (parseInt(match[3]!, 16) & 1) === 1 }))
}

type Outcome = "delivered" | "retried" | "dead" | "stale"

/** A batch in delivery: what its lanes and the keeper share. */
interface Delivery {
  /** Claims not settled yet: the keeper renews their leases. */
  readonly pending: Map<string, Outbox.Claim>
  /** Ids whose claim a renewal found stale: their outcome is never written. */
  readonly stale: Set<string>
  /** Publishes running, by message id, with their lane and deadline. */
  readonly deadlines: Map<string, { readonly fiber: Fiber.RuntimeFiber<unknown, unknown>; readonly at: number }>
  /** Ids of the messages whose publish the keeper interrupted. */
  readonly expired: Set<string>
  renewAt: number
}

/**
 * One projector's machinery over the outbox and publisher in context: `deliverBatch`
 * claims once and settles what it claimed.
 */
const makeWorker = (config: Resolved) =>
  Effect.gen(function*() {
    const outbox = yield* Outbox.Outbox
    const publisher = yield* Publisher
    // Claims not yet settled: whatever is here when the projector stops is released.
    const inFlight = yield* Ref.make(new Map<string, Outbox.Claim>())
    const forget = (ids: Iterable<string>) =>
      Ref.update(inFlight, (map) => {
        for (const id of ids) map.delete(id)
        return map
      })

    const backoff = (attempt: number, error: PublishError) =>
      Effect.map(Random.next, (random) => {
        const ceiling = Math.min(
          Duration.toMillis(config.backoffMax),
          Duration.toMillis(config.backoffMin) * 2 ** Math.min(attempt - 1, 30)
        )
        return Math.max(random * ceiling, Duration.toMillis(config.backoffMin) / 2, error.retryAfterMillis ?? 0)
      })

    const checkPayload = (message: Outbox.OutboxMessage): Either.Either<void, string> => {
      const schema = config.schemas[message.topic]
      if (schema === undefined) return Either.void
      return Either.mapBoth(Schema.decodeUnknownEither(schema)(message.payload), {
        onLeft: (error) => `payload does not decode: ${error.message.slice(0, 500)}`,
        onRight: () => undefined
      })
    }

    const deliveryTimeoutMillis = Duration.toMillis(config.deliveryTimeout)

    const deliveries = new Set<Delivery>()

    const renew = (delivery: Delivery) =>
      Effect.forEach(
        [...delivery.pending.values()],
        (claim) =>
          outbox.renewLease(claim, config.lease).pipe(
            Effect.catchTags({
              OutboxClaimMismatch: () => Effect.sync(() => delivery.stale.add(claim.messageId)),
              OutboxMissing: () => Effect.sync(() => delivery.stale.add(claim.messageId))
            }),
            Effect.catchAll(() => Effect.void)
          ),
        { concurrency: 4, discard: true }
      )

    /**
     * One fiber for the whole projector, not two per batch. A few times per delivery timeout
     * it cuts the publishes past their deadline (check and interruption in one synchronous
     * step, so a lane cannot move on between them). Every third of the lease it renews the
     * leases of each batch's unsettled messages, in a fiber of its own so that a stalled
     * database cannot hold up the deadlines. A renewal that finds a claim stale marks it:
     * that delivery's outcome is then discarded, never written. A batch leaves the set when
     * it ends, however it ends: nothing keeps its leases alive after that.
     */
    const keeper = Effect.withFiberRuntime<never>((self) => {
      const renewEvery = Duration.toMillis(config.lease) / 3
      let renewing: Fiber.RuntimeFiber<void> | undefined
      const tick = Effect.suspend(() => {
        const now = Date.now()
        const due: Array<Delivery> = []
        for (const delivery of deliveries) {
          for (const [id, { at, fiber }] of delivery.deadlines) {
            if (at <= now && fiber.unsafePoll() === null && !delivery.expired.has(id)) {
              delivery.expired.add(id)
              fiber.unsafeInterruptAsFork(self.id())
            }
          }
          if (delivery.renewAt <= now) due.push(delivery)
        }
        if (due.length === 0 || (renewing !== undefined && renewing.unsafePoll() === null)) return Effect.void
        for (const delivery of due) delivery.renewAt = now + renewEvery
        return Effect.map(Effect.fork(Effect.forEach(due, renew, { discard: true })), (fiber) => void (renewing = fiber))
      })
      // Often enough for both: a deadline is cut within a quarter of the timeout, a lease
      // renewed within half of it.
      return tick.pipe(
        Effect.delay(Duration.millis(Math.max(10, Math.min(1000, deliveryTimeoutMillis / 4, renewEvery / 2)))),
        Effect.forever
      )
    })

    const settleFailure = (message: Outbox.OutboxMessage, error: PublishError) =>
      Effect.gen(function*() {
        const retryDelay = error.retryable ? yield* backoff(message.attempt, error) : 0
        const released = yield* outbox.release(message.claim, {
          error: error.reason,
          retryDelay: Duration.millis(retryDelay),
          permanent: !error.retryable
        }).pipe(Effect.either)
        if (Either.isLeft(released)) {
          if (released.left._tag !== "DatabaseError") return "stale" as const
          // The release itself failed: the message keeps its lease and is retried once it
          // expires. The rest of the batch is not held back by it.
          yield* Effect.logWarning(`effect-durable projector: release of ${message.id} failed: ${released.left.message}`)
          return "retried" as const
        }
        return released.right.dead ? "dead" as const : "retried" as const
      })

    // A span per delivery, continuing the producer's trace, when a tracer is installed: with
    // Effect's built-in no-op tracer nobody reads them and they cost a fifth of the drain.
    const traced = (message: Outbox.OutboxMessage, publish: Effect.Effect<void, PublishError>) =>
      Effect.withSpan(publish, "projector.deliver", {
        captureStackTrace: false,
        kind: "producer",
        attributes: {
          "messaging.message.id": message.id,
          "messaging.destination.name": message.topic,
          "effect_durable.attempt": message.attempt
        },
        ...Option.match(producerSpan(message.headers), { onNone: () => ({}), onSome: (parent) => ({ parent }) })
      })

    /** What a publish fiber's exit means for its message. */
    const publishOutcome = (exit: Exit.Exit<void, PublishError>): Either.Either<void, PublishError> =>
      Exit.isSuccess(exit)
        ? Either.void
        : Either.left(Option.getOrElse(
          Cause.failureOption(exit.cause),
          () => retryable(`the publisher died: ${Cause.pretty(exit.cause).slice(0, 500)}`)
        ))

    const session = publisher.session ?? (<A, E>(use: (publish: Publish) => Effect.Effect<A, E>) => use(publisher.publish))
    // Deliveries in flight across all batches: each lane holds a permit (see publishAll).
    const permits = yield* Effect.makeSemaphore(config.concurrency)

    /**
     * Publishes every message of a batch on at most `concurrency` lanes: fibers that each take
     * the next message in turn, so a batch costs `concurrency` fibers, not one per message.
     * The keeper cuts a publish past its deadline by interrupting its lane (no timeout race
     * per message); a fresh lane carries on with the rest.
     * A lane cut just as its publish finished may take the next message down with it: that
     * one is released for a retry (at least once, never lost). Returns each message's result,
     * in order.
     */
    const publishAll = (claimed: ReadonlyArray<Outbox.OutboxMessage>, delivery: Delivery, spans: boolean) =>
      Effect.gen(function*() {
        const results: Array<Either.Either<void, PublishError> | undefined> = new Array(claimed.length)
        /** The message each lane is publishing (-1: none). */
        const current: Array<number> = []
        let next = 0
        const settle = (i: number, result: Either.Either<void, PublishError>) => {
          results[i] = result
          delivery.pending.delete(claimed[i]!.id)
          delivery.deadlines.delete(claimed[i]!.id)
        }
        const lane = (id: number) =>
          session((publish) => Effect.withFiberRuntime<void>((fiber) => {
            const step = (): Effect.Effect<void> => {
              current[id] = -1
              if (next >= claimed.length) return Effect.void
              const i = next++
              const message = claimed[i]!
              const decoded = checkPayload(message)
              if (Either.isLeft(decoded)) {
                settle(i, Either.left(permanent(decoded.left)))
                return Effect.suspend(step)
              }
              current[id] = i
              delivery.deadlines.set(message.id, { fiber, at: Date.now() + deliveryTimeoutMillis })
              const publishing = spans ? traced(message, publish(message)) : publish(message)
              return Effect.flatMap(Effect.exit(publishing), (exit) => {
                settle(i, publishOutcome(exit))
                return step()
              })
            }
            return step()
          }))
        const ended = yield* Queue.unbounded<number>()
        let lanes = 0
        let running = 0
        const startLane = Effect.suspend(() => {
          const id = lanes++
          running++
          // A lane holds a permit while it runs: lanes across all batches are at most `concurrency`.
          return Effect.fork(Effect.onExit(permits.withPermits(1)(lane(id)), () => Queue.offer(ended, id)))
        })
        for (let k = 0; k < Math.min(config.concurrency, claimed.length); k++) yield* startLane
        while (running > 0) {
          const id = yield* Queue.take(ended)
          running--
          const i = current[id] ?? -1
          if (i >= 0 && results[i] === undefined) {
            // The lane was cut mid-publish.
            settle(i, Either.left(retryable(
              delivery.expired.has(claimed[i]!.id)
                ? `delivery timed out after ${Duration.format(config.deliveryTimeout)}`
                : "delivery interrupted with a timed-out one on its lane"
            )))
          }
          if (next < claimed.length) yield* startLane
        }
        return results as Array<Either.Either<void, PublishError>>
      })

    /** Claims one batch and settles every message in it; returns what happened. */
    const deliverBatch: Effect.Effect<Counts, DatabaseError | DurableConfigError> = Effect.gen(function*() {
      const claimed = yield* outbox.claim({
        worker: config.workerId,
        ...(config.topics === undefined ? {} : { topics: config.topics }),
        limit: config.batchSize,
        lease: config.lease
      }).pipe(Effect.withSpan("projector.claim", { attributes: { "effect_durable.worker": config.workerId } }))
      if (claimed.length === 0) return zero
      yield* Ref.update(inFlight, (map) => {
        for (const message of claimed) map.set(message.id, message.claim)
        return map
      })
      yield* Metric.incrementBy(metrics.claimed, claimed.length)
      yield* Metric.update(metrics.batchSize, claimed.length)
      // Per-message metrics are updated directly (what `Metric.update` does, with the fiber's
      // metric labels), not as one effect per message.
      const labels = yield* FiberRef.get(FiberRef.currentMetricLabels)
      const now = Date.now()
      for (const message of claimed) {
        forTopic(metrics.lag, message.topic).unsafeUpdate(Math.max(0, (now - parseTimestamp(message.createdAt)) / 1000), labels)
      }
      const spans = (yield* Effect.tracer) !== nativeTracer
      const settled = Effect.gen(function*() {
        const delivery: Delivery = {
          pending: new Map(claimed.map((message) => [message.id, message.claim] as const)),
          stale: new Set(),
          deadlines: new Map(),
          expired: new Set(),
          renewAt: Date.now() + Duration.toMillis(config.lease) / 3
        }
        const published = yield* Effect.acquireUseRelease(
          Effect.sync(() => deliveries.add(delivery)),
          () => publishAll(claimed, delivery, spans),
          () => Effect.sync(() => deliveries.delete(delivery))
        )
        // A claim found stale is never written; failures are settled one by one (a release each).
        const results: Array<Outcome | "published"> = claimed.map((message, i) =>
          delivery.stale.has(message.id) ? "stale" : Either.isRight(published[i]!) ? "published" : "retried"
        )
        const failures = claimed.flatMap((_, i) => {
          const result = published[i]!
          return results[i] === "retried" && Either.isLeft(result) ? [[i, result.left] as const] : []
        })
        yield* Effect.forEach(
          failures,
          ([i, error]) => Effect.map(settleFailure(claimed[i]!, error), (outcome) => void (results[i] = outcome)),
          { concurrency: config.concurrency, discard: true }
        )
        // One statement marks the whole batch: the round trip is paid once, not per message.
        const toMark = claimed.filter((_, i) => results[i] === "published").map((message) => message.claim)
        const marked = yield* outbox.markProjectedMany(toMark)
        const markedIds = new Set(marked.completed)
        const tally = { claimed: claimed.length, delivered: 0, retried: 0, dead: 0, stale: 0 }
        for (const [i, message] of claimed.entries()) {
          const result = results[i]!
          const outcome: Outcome = result === "published" ? (markedIds.has(message.id) ? "delivered" : "stale") : result
          tally[outcome]++
          forTopic(metrics[outcome], message.topic).unsafeUpdate(1, labels)
        }
        return tally
      })
      // Interrupted (shutdown): the claims stay listed for `releaseInFlight`. Otherwise they are settled.
      return yield* settled.pipe(
        Effect.onExit((exit) => Exit.isInterrupted(exit) ? Effect.void : forget(claimed.map((message) => message.id)))
      )
    })

    /** Releases every claim still held (shutdown): another worker may take them at once. */
    const releaseInFlight = Effect.gen(function*() {
      const left = yield* Ref.getAndSet(inFlight, new Map())
      yield* Effect.forEach(
        left.values(),
        (claim) => Effect.ignore(outbox.release(claim, { error: "projector shut down", retryDelay: 0 })),
        { concurrency: 8, discard: true }
      )
      if (left.size > 0) yield* Effect.logInfo(`effect-durable projector released ${left.size} in-flight messages on shutdown`)
    })

    return { deliverBatch, releaseInFlight, keeper, outbox }
  })

export class Projector extends Context.Tag("@effect-durable/projector/Projector")<Projector, {
  readonly workerId: string
  /** Totals since the projector started. */
  readonly counts: Effect.Effect<Counts>
}>() {}

const add = (a: Counts, b: Counts): Counts => ({
  claimed: a.claimed + b.claimed,
  delivered: a.delivered + b.delivered,
  retried: a.retried + b.retried,
  dead: a.dead + b.dead,
  stale: a.stale + b.stale
})
const zero: Counts = { claimed: 0, delivered: 0, retried: 0, dead: 0, stale: 0 }

/**
 * Runs the projector in the layer's scope. It needs the `Outbox` and a `Publisher`; when a
 * `PgClient` is present it also LISTENs on the outbox channel (one dedicated connection,
 * re-established if it drops).
 */
export const layer = (
  options: ProjectorOptions = {}
): Layer.Layer<Projector, DurableConfigError, Outbox.Outbox | Publisher> =>
  Layer.scoped(
    Projector,
    Effect.gen(function*() {
      const config = yield* validateOptions(options)
      const worker = yield* makeWorker(config)
      const totals = yield* Ref.make(zero)
      // A NOTIFY wakes one idle batch loop; a loop that claimed a full batch wakes the next
      // (more is likely waiting). Waking all at once would have them race for one message.
      const wake = yield* Queue.sliding<void>(1)
      const stop = yield* Deferred.make<void>()

      const pg = yield* Effect.serviceOption(PgClient.PgClient)
      if (Option.isSome(pg)) {
        // Wake on the outbox's NOTIFY (an empty payload: the connection was (re)established).
        yield* listen(pg.value.config, worker.outbox.channel, (topic) => {
          if (topic === "" || config.topics === undefined || config.topics.includes(topic)) {
            Queue.unsafeOffer(wake, undefined)
          }
        })
      }

      const idle = Effect.raceFirst(
        Effect.raceFirst(Queue.take(wake), Effect.sleep(config.pollInterval)),
        Deferred.await(stop)
      )
      const loop: Effect.Effect<void> = Effect.gen(function*() {
          let failures = 0
          while (!(yield* Deferred.isDone(stop))) {
            const result = yield* Effect.either(worker.deliverBatch)
            if (Either.isLeft(result)) {
              // A store failure (the database restarted, a timeout): back off and carry on.
              failures++
              yield* Effect.logWarning(`effect-durable projector: ${result.left.message}; retrying`)
              yield* Effect.raceFirst(
                Effect.sleep(Duration.millis(Math.min(30_000, 100 * 2 ** Math.min(failures, 8)))),
                Deferred.await(stop)
              )
              continue
            }
            failures = 0
            yield* Ref.update(totals, (t) => add(t, result.right))
            if (result.right.claimed === config.batchSize) yield* Queue.offer(wake, undefined)
            // Only an empty claim means there is nothing to do: a short batch can be short because
            // of per-key order (one message per key at a time), with the next heads ready now.
            if (result.right.claimed === 0) yield* idle
          }
        })

      // The keeper (deadlines, lease renewals) runs until every loop is done.
      const keeper = yield* Effect.forkDaemon(worker.keeper)
      const fiber = yield* Effect.forkDaemon(Effect.all(Array.from({ length: config.batchesInFlight }, () => loop), {
        concurrency: "unbounded",
        discard: true
      }))
      yield* Effect.addFinalizer(() =>
        Effect.gen(function*() {
          yield* Deferred.succeed(stop, undefined)
          // Finalizers run uninterruptibly; the wait must be interruptible for the deadline to cut it.
          const finished = yield* Effect.interruptible(Fiber.await(fiber)).pipe(
            Effect.timeout(config.shutdownDeadline),
            Effect.option
          )
          if (Option.isNone(finished)) yield* Fiber.interrupt(fiber)
          yield* Fiber.interrupt(keeper)
          yield* worker.releaseInFlight
        })
      )
      return Projector.of({ workerId: config.workerId, counts: Ref.get(totals) })
    })
  )

/** Delivers until no message is ready, then returns what happened (tests, one-shot jobs). */
export const drain = (options: ProjectorOptions = {}): Effect.Effect<
  Counts,
  DatabaseError | DurableConfigError,
  Outbox.Outbox | Publisher
> =>
  Effect.gen(function*() {
    const worker = yield* makeWorker(yield* validateOptions(options))
    yield* Effect.forkScoped(worker.keeper)
    let totals = zero
    while (true) {
      const counts = yield* worker.deliverBatch
      totals = add(totals, counts)
      if (counts.claimed === 0) return totals
    }
  }).pipe(Effect.scoped)

/** Projector options from configuration (`PROJECTOR_*`), for `layerConfig`. */
export const config: Config.Config<ProjectorOptions> = Config.all({
  topics: Config.option(Config.array(Config.string(), "PROJECTOR_TOPICS")).pipe(
    Config.withDescription("comma-separated topics to deliver (default: all)")
  ),
  workerId: Config.option(Config.string("PROJECTOR_WORKER_ID")),
  batchSize: Config.integer("PROJECTOR_BATCH_SIZE").pipe(Config.withDefault(500)),
  concurrency: Config.integer("PROJECTOR_CONCURRENCY").pipe(Config.withDefault(16)),
  batchesInFlight: Config.integer("PROJECTOR_BATCHES_IN_FLIGHT").pipe(Config.withDefault(3)),
  lease: Config.duration("PROJECTOR_LEASE").pipe(Config.withDefault(Duration.seconds(30))),
  pollInterval: Config.duration("PROJECTOR_POLL_INTERVAL").pipe(Config.withDefault(Duration.seconds(1))),
  backoffMin: Config.duration("PROJECTOR_BACKOFF_MIN").pipe(Config.withDefault(Duration.seconds(1))),
  backoffMax: Config.duration("PROJECTOR_BACKOFF_MAX").pipe(Config.withDefault(Duration.minutes(5))),
  deliveryTimeout: Config.duration("PROJECTOR_DELIVERY_TIMEOUT").pipe(Config.withDefault(Duration.seconds(10))),
  shutdownDeadline: Config.duration("PROJECTOR_SHUTDOWN_DEADLINE").pipe(Config.withDefault(Duration.seconds(10)))
}).pipe(Config.map(({ backoffMax, backoffMin, topics, workerId, ...rest }): ProjectorOptions => ({
  ...rest,
  backoff: { min: backoffMin, max: backoffMax },
  ...(Option.isSome(topics) ? { topics: topics.value } : {}),
  ...(Option.isSome(workerId) ? { workerId: workerId.value } : {})
})))

/** `layer` with its options read from configuration (`config`); bad values are `DurableConfigError`. */
export const layerConfig = (
  overrides: ProjectorOptions = {}
): Layer.Layer<Projector, DurableConfigError, Outbox.Outbox | Publisher> =>
  Layer.unwrapEffect(
    Effect.map(
      Effect.mapError(config, (error) => new DurableConfigError({ field: "projector", rule: String(error) })),
      (options) => layer({ ...options, ...overrides })
    )
  )

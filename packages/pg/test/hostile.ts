// Hostile arguments for the property nets (Properties.test.ts on PostgreSQL, MemoryOutbox.test.ts
// in memory): strings that are not text, numbers that are not numbers, durations that are not
// durations, JSON too deep, too wide or cyclic, claims that are not claims; the operations of
// the queue's contract (`Outbox`, `OutboxWorker`) over them, and the failures a net allows.
import * as Effect from "effect/Effect"
import * as FastCheck from "fast-check"
import * as Outbox from "../src/Outbox.js"
import * as OutboxWorker from "../src/OutboxWorker.js"

export const RUNS = Number(process.env.EFFECT_DURABLE_PROPERTY_RUNS ?? "60")

export const cyclic: Record<string, unknown> = { a: 1 }
cyclic.self = cyclic
let deep: unknown = 1
for (let i = 0; i < 5_000; i++) deep = { d: deep }
export const wide = Object.fromEntries(Array.from({ length: 20_000 }, (_, i) => [`k${i}`, i]))

export const text = FastCheck.oneof(
  FastCheck.string(),
  FastCheck.string({ unit: "binary", maxLength: 20 }),
  FastCheck.string({ unit: "grapheme", maxLength: 20 }),
  FastCheck.constantFrom(
    "",
    "\u0000",
    "a\u0000b",
    "\ud800",
    "\udc00x",
    "é".repeat(200),
    "x".repeat(300),
    "x".repeat(1_000_000),
    "t"
  )
)
export const number = FastCheck.oneof(
  FastCheck.double(),
  FastCheck.integer({ min: -5, max: 2000 }),
  FastCheck.constantFrom(Number.NaN, Infinity, -Infinity, -0, 1e300, 0.5, -1, 2 ** 53 + 2)
)
export const duration = FastCheck.oneof(
  number,
  text,
  FastCheck.constantFrom(
    "1 second",
    "-5 seconds",
    "0 seconds",
    "garbage",
    "1e300 seconds",
    "10 days",
    "200 millis",
    [1, 2],
    [-1, 0],
    5n,
    -5n
  )
)
// An array with a hole: JSON has none, so it is one of the inputs under test.
// eslint-disable-next-line no-sparse-arrays
export const holey = [1, , 3]
export const json = FastCheck.oneof(
  FastCheck.jsonValue({ maxDepth: 3 }),
  FastCheck.constantFrom<unknown>(
    cyclic,
    deep,
    wide,
    undefined,
    () => 1,
    new Date(),
    10n,
    Symbol("s"),
    { a: "\u0000" },
    holey
  )
)
export const anything = FastCheck.oneof(text, number, json, FastCheck.constantFrom<unknown>(null, {}, [], true))
export const claim = FastCheck.oneof(
  FastCheck.record({ messageId: anything, worker: anything, generation: anything }),
  anything
) as FastCheck.Arbitrary<never>
export const optionalBag = <T>(arbitrary: FastCheck.Arbitrary<T>) => FastCheck.option(arbitrary, { nil: undefined })

/** An operation of the queue's contract alone (`Outbox`, `OutboxWorker`): run against PostgreSQL and the in-memory outbox. */
export interface QueueOperation {
  readonly name: string
  readonly run: Effect.Effect<unknown, unknown, Outbox.Outbox | OutboxWorker.OutboxWorker>
}

export const queueOperations: ReadonlyArray<FastCheck.Arbitrary<QueueOperation>> = [
  FastCheck.tuple(
    text,
    json,
    optionalBag(duration),
    optionalBag(text),
    optionalBag(FastCheck.dictionary(text, anything, { maxKeys: 3 }))
  )
    .map(([topic, payload, delay, orderingKey, headers]) => ({
      name: "enqueue",
      run: Effect.flatMap(
        Outbox.Outbox,
        (o) => o.enqueue(topic, payload, { delay, orderingKey, headers } as Outbox.EnqueueOptions)
      )
    })),
  FastCheck.array(FastCheck.tuple(text, json), { maxLength: 3 }).map((messages) => ({
    name: "enqueueMany",
    run: Effect.flatMap(Outbox.Outbox, (o) => o.enqueueMany(messages.map(([topic, payload]) => ({ topic, payload }))))
  })),
  FastCheck.tuple(text, anything, number, duration, anything).map((
    [worker, topics, limit, lease, maxLeaseExpiries]
  ) => ({
    name: "claim",
    run: Effect.flatMap(
      OutboxWorker.OutboxWorker,
      (o) =>
        o.claim(
          { worker, topics, limit, lease, maxLeaseExpiries, perKey: limit } as unknown as OutboxWorker.ClaimOptions
        )
    )
  })),
  claim.map((c) => ({
    name: "markProjected",
    run: Effect.flatMap(OutboxWorker.OutboxWorker, (o) => o.markProjected(c))
  })),
  FastCheck.array(claim, { maxLength: 3 }).map((cs) => ({
    name: "markProjectedMany",
    run: Effect.flatMap(OutboxWorker.OutboxWorker, (o) => o.markProjectedMany(cs))
  })),
  FastCheck.tuple(claim, anything, duration, anything).map(([c, error, retryDelay, permanent]) => ({
    name: "release",
    run: Effect.flatMap(OutboxWorker.OutboxWorker, (o) => o.release(c, { error, retryDelay, permanent } as never))
  })),
  FastCheck.tuple(FastCheck.array(claim, { maxLength: 3 }), duration).map(([cs, lease]) => ({
    name: "renewLeases",
    run: Effect.flatMap(OutboxWorker.OutboxWorker, (o) => o.renewLeases(cs, lease as never))
  })),
  FastCheck.array(claim, { maxLength: 3 }).map((cs) => ({
    name: "giveBack",
    run: Effect.flatMap(OutboxWorker.OutboxWorker, (o) => o.giveBack(cs))
  }))
]

export const TYPED = new Set([
  "InvalidInput",
  "UnsupportedJsonValue",
  "PayloadTooLarge",
  "ClaimMismatch",
  "MessageMissing",
  "MutationConflict",
  "MutationInProgress",
  "CasConflict",
  "InvalidCursor",
  "CursorBindingMismatch",
  "DurableConfigError",
  // RateLimiterStore's one error (effect's interface): a refusal naming the rule.
  "RateLimiterError"
])

// What pg suites share beyond `@effect-durable/testing`: a plain fresh database (for suites
// that migrate themselves), barriers the database decides, and the SQLSTATE of a failure.
import * as TestDatabase from "@effect-durable/testing/TestDatabase"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { sqlStateOf } from "../src/ErrorClassification.js"
export { eventually } from "@effect-durable/testing/Eventually"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Schedule from "effect/Schedule"
import * as SqlClient from "effect/sql/SqlClient"
import * as TestClock from "effect/testing/TestClock"
import { DurableSettings, type SettingsInput } from "../src/DurableConfig.js"
import { moveText } from "../src/internal/queue/moves.js"
import * as Outbox from "../src/Outbox.js"
import * as OutboxWorker from "../src/OutboxWorker.js"

export const database = (options: TestDatabase.Options = {}) =>
  TestDatabase.layerFresh({ maxConnections: 12, ...options })

/** A migrated substrate in a fresh database: settings, ledger, outbox, inbox, CAS. */
export const substrate = (
  settings: SettingsInput = {},
  options: TestDatabase.Options = {},
  outbox: Outbox.OutboxOptions = {}
) => TestSubstrate.layer({ settings, outbox, database: options })

/**
 * Waits until `n` sessions wait for an advisory lock: a barrier the database decides.
 * Polls on the live clock (the TestClock of `it.effect` never advances by itself).
 */
export const waitersOnAdvisoryLocks = (n: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ waiting: number }>`SELECT count(*)::int AS waiting FROM pg_locks
                             WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`
      .pipe(
        Effect.map((rows) => rows[0]!.waiting),
        Effect.repeat({ until: (waiting) => waiting >= n, schedule: Schedule.spaced("10 millis") }),
        Effect.timeoutOrElse({
          duration: "20 seconds",
          orElse: () => Effect.fail(new Error(`fewer than ${n} lock waiters`))
        }),
        TestClock.withLive
      ))

/** Releases `n` fibers at once; each awaits the returned gate before it starts. */
export const barrier = Effect.map(Deferred.make<void>(), (gate) => ({
  wait: Deferred.await(gate),
  open: Deferred.succeed(gate, undefined)
}))

/** Runs `n` fibers released together through one gate; their results, in order. */
export const together = <A, E, R>(n: number, fiber: (i: number) => Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const gate = yield* barrier
    const running = yield* Effect.all(
      Array.from({ length: n }, (_, i) => Effect.andThen(gate.wait, fiber(i))),
      { concurrency: "unbounded" }
    ).pipe(Effect.forkChild)
    yield* gate.open
    return yield* Fiber.join(running)
  })

/**
 * `n` worker loops released together, each claiming (`claim(i)`) and settling what it took
 * until `total` ids were taken in all (an empty claim waits 5 ms); every id taken, in claim order.
 */
export const claimLoops = <Row extends { readonly id: string }, E, R>(
  n: number,
  total: number,
  claim: (i: number) => Effect.Effect<ReadonlyArray<Row>, E, R>,
  settle: (taken: ReadonlyArray<Row>) => Effect.Effect<unknown, E, R>
) =>
  Effect.gen(function*() {
    const taken: Array<string> = []
    yield* together(n, (i) =>
      Effect.gen(function*() {
        while (taken.length < total) {
          const batch = yield* claim(i)
          taken.push(...batch.map((row) => row.id))
          yield* settle(batch)
          if (batch.length === 0) yield* Effect.sleep("5 millis")
        }
      }))
    return taken
  })

/** The SQLSTATE of a failure (a driver `SqlError` or a classified `DatabaseError`). */
export const sqlState = (error: unknown): string | undefined => sqlStateOf(error) ?? undefined

/** A claim of up to `limit` messages of `topics` (all when left out) with a one-minute lease. */
export const claimOf = (worker: string, topics: ReadonlyArray<string> | undefined, limit = 100) =>
  Effect.flatMap(
    OutboxWorker.OutboxWorker,
    (w) => w.claim({ worker, limit, lease: "1 minute", ...(topics === undefined ? {} : { topics }) })
  )

/** Enqueues `n` messages `{ i }` on `topic`, each with `options`; returns their ids. */
export const enqueueAll = (topic: string, n: number, options: Outbox.EnqueueOptions = {}) =>
  Effect.flatMap(
    Outbox.Outbox,
    (outbox) => outbox.enqueueMany(Array.from({ length: n }, (_, i) => ({ topic, payload: { i }, options })))
  )

export const markAll = (claimed: ReadonlyArray<OutboxWorker.OutboxMessage>) =>
  Effect.flatMap(OutboxWorker.OutboxWorker, (w) => w.markProjectedMany(claimed.map((m) => m.claim)))

/** A node of a JSON query plan (`EXPLAIN (FORMAT JSON)`), with what the tests read of it. */
export interface PlanNode {
  readonly "Node Type"?: string
  readonly "Index Name"?: string
  readonly "Relation Name"?: string
  readonly "Actual Rows"?: number
  readonly "Actual Loops"?: number
  readonly "Rows Removed by Filter"?: number
  readonly Plans?: ReadonlyArray<PlanNode>
}

/** Every node of a plan. */
export const planNodes = (node: PlanNode): ReadonlyArray<PlanNode> => [node, ...(node.Plans ?? []).flatMap(planNodes)]

/** The nodes of the plan `EXPLAIN (FORMAT JSON)` or `explainClaim` returned. */
export const nodesOfPlan = (plan: unknown): ReadonlyArray<PlanNode> =>
  planNodes((plan as ReadonlyArray<{ Plan: PlanNode }>)[0]!.Plan)

/**
 * The rows an analyzed plan's nodes returned where `which` holds, every loop, and with
 * `filtered` those they read and filtered out too.
 */
export const rowsRead = (plan: unknown, which: (node: PlanNode) => boolean, filtered = true): number =>
  nodesOfPlan(plan).filter(which).reduce(
    (sum, node) =>
      sum +
      ((node["Actual Rows"] ?? 0) + (filtered ? node["Rows Removed by Filter"] ?? 0 : 0)) * (node["Actual Loops"] ?? 1),
    0
  )

/** The analyzed plan of `statement`, run in a transaction that is rolled back. */
export const analyzed = (statement: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    let plan: unknown
    return Effect.flip(sql.withTransaction(Effect.andThen(
      sql.unsafe<{ "QUERY PLAN": unknown }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${statement}`),
      (rows) => {
        plan = rows[0]!["QUERY PLAN"]
        return Effect.fail("rolled back")
      }
    ))).pipe(Effect.map(() => plan))
  })

/**
 * The slot way's exact count of one claim row (migration 27), as the deployed claim path `fn`
 * (migration 29) writes it, over the first row `rows` selects (a query of its claim rows): a
 * statement to analyze.
 */
export const slotRecount = (fn: "outbox_claim_slots" | "inbox_claim_slots", rows: string) =>
  Effect.map(
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      sql<{ source: string }>`
        SELECT prosrc AS source FROM pg_proc WHERE proname = ${fn} AND pronamespace = 'durable'::regnamespace`),
    ([deployed]) =>
      `SELECT ${
        /slot_still := (\(SELECT count\(\*\) FROM unnest\(slot_row[\s\S]*?\));\n/.exec(deployed!.source)![1]
      } FROM (${rows} LIMIT 1) slot_row`
  )

/**
 * Settles open outbox messages by hand, as a mark does (they move to the history, delivered at
 * `at`): for tests that arrange delivered messages without a worker. `where` is over `q`.
 */
export const projectByHand = (where: string, at = "now()") =>
  Effect.flatMap(Effect.all([SqlClient.SqlClient, DurableSettings]), ([sql, settings]) =>
    sql.unsafe<{ id: string }>(
      moveText(settings.table, {
        from: "outbox",
        to: "outbox_history",
        where,
        changes: { projected_at: at, claimed_until: "NULL" },
        returning: "id::text AS id"
      })
    ))

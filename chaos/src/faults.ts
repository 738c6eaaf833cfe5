/**
 * The fault schedule and the faults themselves. Each fault records when it began and ended
 * and which messages the parties it hit held at that moment (claimed, not settled), so the
 * checker can say how long delivery took to recover. What each fault proves is in the
 * README; in short:
 * - kill: SIGKILL of a worker mid-delivery, restarted 1-3 s later: its leases expire and
 *   others deliver what it held (nothing lost, marks never from a dead claim);
 * - stall: SIGSTOP of a worker for longer than the lease, then SIGCONT: it wakes up holding
 *   claims others took over; it must not settle them (fencing), and duplicates stay bounded;
 * - starve: SIGSTOP of every worker as long, then SIGCONT (a starved machine): they all wake
 *   up with stale claims and a backlog, which they claim in full batches whose delivery
 *   outlasts the lease (lease renewal under load);
 * - terminate: pg_terminate_backend of every worker, keeper, listener and producer connection;
 * - restart: PostgreSQL stopped in immediate mode (a crash), down 1-4 s, crash recovery;
 * - commit-cut: the producer's connection cut right after it sends COMMIT (the proxy
 *   forwards it or not): the retry through the ledger must give exactly one business row.
 */
import * as QueueLifecycle from "@effect-durable/pg/QueueLifecycle"
import type * as PgServer from "@effect-durable/testing/PgServer"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as SqlClient from "effect/sql/SqlClient"
import type { CommitCutProxy, CutMode } from "./proxy.js"
import type { Random } from "./random.js"
import { APPLICATION } from "./schema.js"
import type { Slot, Workers } from "./workers.js"

export type FaultKind = "kill" | "stall" | "starve" | "terminate" | "restart" | "commit-cut"

export interface Planned {
  /** Offset from the start of production, ms. */
  readonly at: number
  readonly kind: FaultKind
}

export interface FaultRecord {
  readonly kind: FaultKind
  readonly detail: string
  readonly startedAt: number
  readonly endedAt: number
  /** Messages (outbox ids) the parties it hit held when it began. */
  readonly held: ReadonlyArray<string>
  /** The workers it hit (their worker ids at that moment), or every one; none for a commit cut. */
  readonly workers: ReadonlyArray<string> | "all"
  /** A fault that could not run (no victim, nothing to cut) is recorded as skipped. */
  readonly skipped: boolean
}

const FULL_PRODUCTION_MILLIS = 12 * 60_000

/** Longer than the lease: the frozen worker's claims lapse and are taken over. */
export const stallMillis = (leaseMillis: number) => Math.round(leaseMillis * 1.5) + 1_000

/**
 * Quick: every fault once, 6 s apart, the long ones last and one after the other (a stall
 * outlasts the lease: with the default 30 s lease the schedule takes longer). Full: a fault
 * every 8-16 s for 12 minutes, kinds drawn from a bag so every kind recurs.
 */
export const plan = (quick: boolean, leaseMillis: number, random: Random): ReadonlyArray<Planned> => {
  if (quick) {
    const short: ReadonlyArray<FaultKind> = [
      "kill",
      "commit-cut",
      "terminate",
      "commit-cut",
      "restart",
      "commit-cut",
      "stall"
    ]
    const planned: Array<Planned> = short.map((kind, i) => ({ at: 8_000 + i * 6_000, kind }))
    planned.push({ at: planned.at(-1)!.at + stallMillis(leaseMillis) + 2_000, kind: "starve" })
    return planned
  }
  const bag: ReadonlyArray<FaultKind> = [
    "kill",
    "kill",
    "stall",
    "stall",
    "starve",
    "terminate",
    "terminate",
    "restart",
    "commit-cut",
    "commit-cut"
  ]
  const planned: Array<Planned> = []
  let kinds: Array<FaultKind> = []
  for (let at = 8_000; at < FULL_PRODUCTION_MILLIS - 10_000; at += random.between(8_000, 16_000)) {
    if (kinds.length === 0) kinds = random.shuffle(bag)
    planned.push({ at, kind: kinds.pop()! })
  }
  return planned
}

/** How long the producer commits: the whole schedule (the quick one ends with its starve). */
export const productionMillis = (quick: boolean, schedule: ReadonlyArray<Planned>): number =>
  quick ? Math.max(60_000, (schedule.at(-1)?.at ?? 0) + 5_000) : FULL_PRODUCTION_MILLIS

export interface Environment {
  readonly workers: Workers
  readonly server: PgServer.PgServer["Service"]
  readonly proxy: CommitCutProxy
  /** A direct connection to the run's database, as a superuser. */
  readonly admin: SqlClient.SqlClient
  /** The lease the workers run with: a stall lasts longer. */
  readonly leaseMillis: number
  readonly random: Random
  /** Commit cuts so far. */
  commitCuts: number
}

/** Outbox messages claimed and not settled, by the given workers (all when omitted). */
const heldBy = (env: Environment, workerIds?: ReadonlyArray<string>) =>
  env.admin<{ id: string }>`
    SELECT id::text AS id FROM durable.outbox
     WHERE ${env.admin.literal(QueueLifecycle.outbox.is.claimed)}
       ${workerIds === undefined ? env.admin`` : env.admin`AND claimed_by IN ${env.admin.in(workerIds)}`}`.pipe(
    Effect.map((rows) => rows.map((row) => row.id)),
    // A database that is down (another fault) holds nothing we could learn about.
    Effect.orElseSucceed(() => [] as Array<string>)
  )

const record = (
  kind: FaultKind,
  detail: string,
  startedAt: number,
  held: ReadonlyArray<string>,
  workers: ReadonlyArray<string> | "all",
  skipped = false
): FaultRecord => ({
  kind,
  detail,
  startedAt,
  endedAt: Date.now(),
  held,
  workers,
  skipped
})

/**
 * What the parties hold once the fault has hit, added to what they held when it began: a claim
 * a victim's statement was committing at that moment (frozen or killed mid-claim, its claim
 * still lands) is held too, and a duplicate it causes is this fault's.
 */
const heldAfter = (env: Environment, before: ReadonlyArray<string>, workerIds?: ReadonlyArray<string>) =>
  Effect.map(
    Effect.andThen(Effect.sleep(Duration.millis(200)), heldBy(env, workerIds)),
    (after) => [...new Set([...before, ...after])]
  ).pipe(Effect.orElseSucceed(() => before))

const skip = (kind: FaultKind, why: string) => Effect.sync(() => record(kind, why, Date.now(), [], [], true))

/**
 * The victim of a worker fault: the running worker holding the most claims, so the fault
 * lands mid-delivery. Waits up to 10 s for a worker to hold any (deliveries come in bursts),
 * then takes a random one. Never the last running worker.
 */
const chooseVictim = (env: Environment): Effect.Effect<Slot | undefined> =>
  Effect.gen(function*() {
    const deadline = Date.now() + 10_000
    while (true) {
      const running = env.workers.slots.filter((slot) => slot.state === "running" && slot.child.running())
      if (running.length <= 1) return undefined
      const rows = yield* env.admin<{ worker: string; n: number }>`
        SELECT claimed_by AS worker, count(*)::int AS n FROM durable.outbox
         WHERE ${env.admin.literal(QueueLifecycle.outbox.is.claimed)}
         GROUP BY claimed_by ORDER BY n DESC`.pipe(Effect.orElseSucceed(() => []))
      const busiest = rows.map((row) => running.find((slot) => slot.workerId === row.worker)).find((slot) =>
        slot !== undefined
      )
      if (busiest !== undefined) return busiest
      if (Date.now() > deadline) return env.random.pick(running)
      yield* Effect.sleep("100 millis")
    }
  })

const withVictim = (env: Environment, kind: FaultKind, use: (slot: Slot) => Effect.Effect<FaultRecord>) =>
  Effect.flatMap(chooseVictim(env), (slot) => slot === undefined ? skip(kind, "no worker to spare") : use(slot))

const kill = (env: Environment) =>
  withVictim(env, "kill", (slot) =>
    Effect.gen(function*() {
      const startedAt = Date.now()
      const workerId = slot.workerId
      const before = yield* heldBy(env, [workerId])
      yield* Effect.promise(() => env.workers.kill(slot))
      const held = yield* heldAfter(env, before, [workerId])
      const down = env.random.between(1_000, 3_000)
      yield* Effect.sleep(Duration.millis(down))
      env.workers.restart(slot)
      return record(
        "kill",
        `SIGKILL ${workerId} holding ${held.length}, restarted after ${(down / 1000).toFixed(1)} s as ${slot.workerId}`,
        startedAt,
        held,
        [workerId]
      )
    }))

const stall = (env: Environment) =>
  withVictim(env, "stall", (slot) =>
    Effect.gen(function*() {
      const startedAt = Date.now()
      const before = yield* heldBy(env, [slot.workerId])
      const millis = stallMillis(env.leaseMillis)
      env.workers.pause(slot)
      const held = yield* heldAfter(env, before, [slot.workerId])
      yield* Effect.sleep(Duration.millis(millis - 200)).pipe(
        Effect.ensuring(Effect.sync(() => env.workers.resume(slot)))
      )
      return record(
        "stall",
        `SIGSTOP ${slot.workerId} holding ${held.length} for ${(millis / 1000).toFixed(1)} s`,
        startedAt,
        held,
        [slot.workerId]
      )
    }))

const starve = (env: Environment) =>
  Effect.gen(function*() {
    const startedAt = Date.now()
    const slots = env.workers.slots.filter((slot) => slot.state === "running" && slot.child.running())
    if (slots.length === 0) return record("starve", "no worker running", startedAt, [], [], true)
    const before = yield* heldBy(env, slots.map((slot) => slot.workerId))
    const millis = stallMillis(env.leaseMillis)
    for (const slot of slots) env.workers.pause(slot)
    const held = yield* heldAfter(env, before, slots.map((slot) => slot.workerId))
    yield* Effect.sleep(Duration.millis(millis - 200)).pipe(
      Effect.ensuring(Effect.sync(() => slots.forEach((slot) => env.workers.resume(slot))))
    )
    return record(
      "starve",
      `SIGSTOP of all ${slots.length} workers holding ${held.length} for ${(millis / 1000).toFixed(1)} s`,
      startedAt,
      held,
      slots.map((slot) => slot.workerId)
    )
  })

const terminate = (env: Environment) =>
  Effect.gen(function*() {
    const startedAt = Date.now()
    const before = yield* heldBy(env)
    // The victims are chosen first (MATERIALIZED): a filter is never reordered behind the kill.
    const rows = yield* env.admin<{ application_name: string }>`
      WITH victims AS MATERIALIZED (
        SELECT pid, application_name FROM pg_stat_activity
         WHERE (application_name LIKE ${`${APPLICATION.workerPrefix}%`}
                OR application_name IN (${APPLICATION.producer}, ${APPLICATION.listener}, ${APPLICATION.keeper}))
           AND pid <> pg_backend_pid())
      SELECT application_name FROM victims WHERE pg_terminate_backend(pid)`.pipe(Effect.orElseSucceed(() => []))
    const byName = new Map<string, number>()
    for (const row of rows) byName.set(row.application_name, (byName.get(row.application_name) ?? 0) + 1)
    const detail = [...byName].sort().map(([name, n]) => `${name} ${n}`).join(", ")
    const held = yield* heldAfter(env, before)
    return record("terminate", `pg_terminate_backend: ${rows.length} backends (${detail})`, startedAt, held, "all")
  })

const restart = (env: Environment) =>
  Effect.gen(function*() {
    const startedAt = Date.now()
    const held = yield* heldBy(env)
    const down = env.random.between(1_000, 4_000)
    const result = yield* Effect.result(env.server.restartWith({ mode: "immediate", downtime: Duration.millis(down) }))
    if (result._tag === "Failure") {
      return record("restart", `restart failed: ${result.failure.message}`, startedAt, held, "all", true)
    }
    return record(
      "restart",
      `immediate stop, down ${(down / 1000).toFixed(1)} s, crash recovery`,
      startedAt,
      held,
      "all"
    )
  })

const commitCut = (env: Environment) =>
  Effect.gen(function*() {
    const startedAt = Date.now()
    // Alternating, so both outcomes of an ambiguous commit occur in every run.
    const mode: CutMode = env.commitCuts++ % 2 === 0 ? "forward" : "drop"
    const cut = yield* Effect.promise(() => env.proxy.cutNextCommit(mode)).pipe(
      Effect.timeout("10 seconds"),
      Effect.option
    )
    if (cut._tag === "None") {
      env.proxy.disarm()
      return record("commit-cut", `no COMMIT to cut within 10 s (${mode})`, startedAt, [], [], true)
    }
    return record(
      "commit-cut",
      mode === "forward"
        ? "producer cut after COMMIT reached the server"
        : "producer cut with COMMIT withheld from the server",
      startedAt,
      [],
      []
    )
  })

const inject = (env: Environment, kind: FaultKind): Effect.Effect<FaultRecord> => {
  switch (kind) {
    case "kill":
      return kill(env)
    case "stall":
      return stall(env)
    case "starve":
      return starve(env)
    case "terminate":
      return terminate(env)
    case "restart":
      return restart(env)
    case "commit-cut":
      return commitCut(env)
  }
}

/**
 * Runs the schedule from `startedAt`: each fault in a fiber of its own at its time (a stall
 * lasts longer than the gap to the next fault). Returns every fault's record, in order.
 */
export const run = (
  env: Environment,
  schedule: ReadonlyArray<Planned>,
  startedAt: number,
  onFault: (fault: FaultRecord) => void
): Effect.Effect<ReadonlyArray<FaultRecord>> =>
  Effect.gen(function*() {
    const fibers: Array<Fiber.Fiber<FaultRecord>> = []
    for (const planned of schedule) {
      yield* Effect.sleep(Duration.millis(Math.max(0, startedAt + planned.at - Date.now())))
      fibers.push(
        yield* Effect.forkChild(Effect.tap(inject(env, planned.kind), (fault) => Effect.sync(() => onFault(fault))))
      )
    }
    return yield* Fiber.joinAll(fibers)
  })

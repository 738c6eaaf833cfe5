// The engine against a real PostgreSQL: upstream's own `layerMemory` cases that do not hinge
// on a TestClock, then a test named for each guarantee of the engine. Every case runs on the
// live clock (`it.live`): clocks are the database's.
import { eventually } from "@effect-durable/testing/Eventually"
import * as TestSubstrate from "@effect-durable/testing/TestSubstrate"
import { describe, expect, it } from "@effect/vitest"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as SqlClient from "effect/sql/SqlClient"
import * as Activity from "effect/workflow/Activity"
import * as DurableClock from "effect/workflow/DurableClock"
import * as DurableDeferred from "effect/workflow/DurableDeferred"
import * as Workflow from "effect/workflow/Workflow"
import * as Preemption from "../src/internal/preemption.js"
import * as PgWorkflowEngine from "../src/PgWorkflowEngine.js"

const substrate = TestSubstrate.layer({ database: { maxConnections: 16, applicationName: "workflow-test" } })
const engine = (options: PgWorkflowEngine.PgWorkflowEngineOptions = {}) =>
  PgWorkflowEngine.layer({ pollInterval: "200 millis", ...options }).pipe(Layer.provideMerge(substrate))

/** The execution's row and its journal, as the database holds them. */
const execution = (workflow: string, executionId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ status: string; runs: number; payload_mismatches: number }>`
      SELECT status, runs, payload_mismatches FROM durable.workflow_executions
       WHERE workflow = ${workflow} AND execution_id = ${executionId}`.pipe(
      Effect.map((rows) => rows[0]),
      Effect.orDie
    ))

const steps = (workflow: string, executionId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ kind: string; name: string }>`
      SELECT kind, name FROM durable.workflow_steps WHERE workflow = ${workflow} AND execution_id = ${executionId}
       ORDER BY kind, name`.pipe(Effect.orDie))

/** Run messages of a workflow whose delivery ever failed. */
const failedRunDeliveries = (workflow: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ n: number }>`SELECT count(*)::int AS n FROM durable.outbox_messages
                        WHERE topic = ${"workflow.run:" + workflow} AND last_error IS NOT NULL`.pipe(
      Effect.map((rows) => rows[0]!.n),
      Effect.orDie
    ))

/** Polls until the execution is complete; its result. */
const completed = <A, E, R>(poll: Effect.Effect<Option.Option<Workflow.Result<A, E>>, never, R>) =>
  eventually(poll, (result) => Option.isSome(result) && result.value._tag === "Complete").pipe(
    Effect.map((result) => Option.getOrThrow(result))
  )

describe("PgWorkflowEngine: upstream's layerMemory cases", () => {
  const IncrementWorkflow = Workflow.make("Pg/IncrementWorkflow", {
    payload: { value: Schema.Number },
    success: Schema.Number,
    idempotencyKey: ({ value }) => String(value)
  })
  const IncrementWorkflowLayer = IncrementWorkflow.toLayer(({ value }) => Effect.succeed(value + 1))

  class ClassWorkflow extends Workflow.make("Pg/ClassWorkflow", {
    payload: { value: Schema.Number },
    success: Schema.Number,
    idempotencyKey: ({ value }) => String(value)
  }) {}
  const ClassWorkflowLayer = ClassWorkflow.toLayer(({ value }) => Effect.succeed(value + 1))

  it.layer(Layer.mergeAll(IncrementWorkflowLayer, ClassWorkflowLayer).pipe(Layer.provideMerge(engine())), {
    excludeTestServices: true
  })((it) => {
    it.effect("executes and polls workflows", () =>
      Effect.gen(function*() {
        const executionId = yield* IncrementWorkflow.execute({ value: 1 }, { discard: true })
        const result = yield* IncrementWorkflow.execute({ value: 1 })
        const polled = yield* IncrementWorkflow.poll(executionId)
        expect(result).toBe(2)
        expect(Option.isSome(polled) && polled.value._tag === "Complete" && Exit.isSuccess(polled.value.exit)).toBe(
          true
        )
        expect(yield* execution(IncrementWorkflow._tag, executionId)).toMatchObject({ status: "complete", runs: 1 })
      }))

    it.effect("discard returns the deterministic execution ID", () =>
      Effect.gen(function*() {
        const executionId = yield* IncrementWorkflow.executionId({ value: 5 })
        expect(yield* IncrementWorkflow.execute({ value: 5 }, { discard: true })).toBe(executionId)
      }))

    it.effect("supports class extension", () =>
      Effect.gen(function*() {
        expect(yield* ClassWorkflow.execute({ value: 1 })).toBe(2)
      }))

    it.effect("poll of an execution never started is none", () =>
      Effect.gen(function*() {
        expect(Option.isNone(yield* IncrementWorkflow.poll("never-started"))).toBe(true)
      }))
  })

  // upstream: "layerMemory wakes an active workflow when a durable deferred completes"
  const RaceWorkflow = Workflow.make("Pg/DeferredRaceWorkflow", {
    payload: { id: Schema.String },
    success: Schema.String,
    idempotencyKey: ({ id }) => id
  })
  const RaceGate = DurableDeferred.make("Pg/DeferredRaceGate", { success: Schema.String })
  let raceRuns = 0
  const RaceLayer = RaceWorkflow.toLayer(() =>
    Effect.suspend(() => {
      raceRuns++
      return DurableDeferred.raceAll({
        name: "race",
        success: Schema.String,
        error: Schema.Never,
        effects: [DurableDeferred.await(RaceGate), Effect.sleep("1 hour").pipe(Effect.as("activity"))]
      })
    })
  )
  it.layer(RaceLayer.pipe(Layer.provideMerge(engine())), { excludeTestServices: true })((it) => {
    it.effect("wakes an active workflow when a durable deferred completes", () =>
      Effect.gen(function*() {
        const payload = { id: "race-1" }
        const executionId = yield* RaceWorkflow.executionId(payload)
        const fiber = yield* RaceWorkflow.execute(payload).pipe(Effect.forkChild({ startImmediately: true }))
        yield* eventually(execution(RaceWorkflow._tag, executionId), (row) => row?.status === "running")
        const token = DurableDeferred.tokenFromExecutionId(RaceGate, { workflow: RaceWorkflow, executionId })
        yield* DurableDeferred.succeed(RaceGate, { token, value: "signal" })
        expect(yield* Fiber.join(fiber)).toBe("signal")
        // The completion preempts the parked run (2 runs), or lands before it parks (1).
        expect([1, 2]).toContain(raceRuns)
        // A preemption is a suspension, never a failed delivery of the run message.
        expect(yield* failedRunDeliveries(RaceWorkflow._tag)).toBe(0)
      }))
  })
})

describe("PgWorkflowEngine: guarantees", () => {
  // The full chaos schedule's stuck execution (2026-12-04): a clock fired, its completion and the
  // next run's message committed together, the run began and read the completion, and only then
  // did the clock's in-process wake reach it — still registered as awaited, the run was
  // preempted and settled suspended with the wake sequence unchanged. Nothing woke it again.
  // Then the workflow chaos schedule's repeated activity (2026-12-06): the same late wake cut
  // the run inside the activity that follows, which ran again in the next run. A run that has
  // read the completion is not preempted by it.
  const LateWake = Workflow.make("Pg/LateWake", {
    payload: { id: Schema.String },
    success: Schema.String,
    idempotencyKey: ({ id }) => id
  })
  const LateGate = DurableDeferred.make("Pg/LateWake/Gate", { success: Schema.String })
  const late = { slowRuns: 0, entered: Deferred.makeUnsafe<void>(), release: Deferred.makeUnsafe<void>() }
  const LateWakeLayer = LateWake.toLayer(() =>
    Effect.gen(function*() {
      const value = yield* DurableDeferred.await(LateGate)
      yield* Activity.make({
        name: "slow",
        execute: Effect.gen(function*() {
          late.slowRuns++
          yield* Deferred.succeed(late.entered, undefined)
          yield* Deferred.await(late.release)
        })
      })
      return value
    })
  )
  it.layer(LateWakeLayer.pipe(Layer.provideMerge(engine())), { excludeTestServices: true })((it) => {
    it.effect("a completion's late wake does not cut a run that has read it: the activity after it runs once", () =>
      Effect.gen(function*() {
        const executionId = yield* LateWake.execute({ id: "late-1" }, { discard: true })
        yield* eventually(execution(LateWake._tag, executionId), (row) => row?.status === "suspended")
        const token = DurableDeferred.tokenFromExecutionId(LateGate, { workflow: LateWake, executionId })
        yield* DurableDeferred.succeed(LateGate, { token, value: "open" })
        // The next run has read the gate's value and is inside "slow": now the late wake.
        yield* Deferred.await(late.entered)
        const preempt = Preemption.lookup(yield* SqlClient.SqlClient)!
        yield* preempt(executionId, LateGate.name)
        yield* Deferred.succeed(late.release, undefined)
        const result = yield* completed(LateWake.poll(executionId))
        expect(result).toEqual(new Workflow.Complete({ exit: Exit.succeed("open") }))
        // The run that read the gate went on: "slow" ran once, in one run after the one that parked.
        expect(late.slowRuns).toBe(1)
        expect(yield* execution(LateWake._tag, executionId)).toMatchObject({ status: "complete", runs: 2 })
      }))
  })

  // An order: reserve (an activity), wait for payment (a deferred), a durable clock, ship.
  const Order = Workflow.make("Pg/Order", {
    payload: { id: Schema.String },
    success: Schema.String,
    idempotencyKey: ({ id }) => id
  })
  const Paid = DurableDeferred.make("Pg/Order/Paid", { success: Schema.Number })
  const counts = { bodies: 0, reserves: 0, ships: 0, compensations: 0 }
  const OrderLayer = Order.toLayer(({ id }) =>
    Effect.gen(function*() {
      counts.bodies++
      const reserved = yield* Activity.make({
        name: "reserve",
        success: Schema.String,
        execute: Effect.sync(() => {
          counts.reserves++
          return `reserved:${id}`
        })
      }).pipe(Workflow.withCompensation(() => Effect.sync(() => void counts.compensations++)))
      const amount = yield* DurableDeferred.await(Paid)
      yield* DurableClock.sleep({ name: "cool-off", duration: "300 millis", inMemoryThreshold: Duration.zero })
      yield* Activity.make({ name: "ship", execute: Effect.sync(() => void counts.ships++) })
      return `${reserved}:paid:${amount}`
    })
  )

  it.layer(OrderLayer.pipe(Layer.provideMerge(engine())), { excludeTestServices: true })((it) => {
    it.effect("activities run once across replays, a deferred and a database-clock sleep resume the execution", () =>
      Effect.gen(function*() {
        Object.assign(counts, { bodies: 0, reserves: 0, ships: 0, compensations: 0 })
        const executionId = yield* Order.execute({ id: "o-1" }, { discard: true })
        yield* eventually(Order.poll(executionId), (r) => Option.isSome(r) && r.value._tag === "Suspended")
        expect(counts).toMatchObject({ reserves: 1, ships: 0 })
        const token = DurableDeferred.tokenFromExecutionId(Paid, { workflow: Order, executionId })
        yield* DurableDeferred.succeed(Paid, { token, value: 42 })
        // A second completion of the same deferred is ignored: the first write wins.
        yield* DurableDeferred.succeed(Paid, { token, value: 7 })
        const result = yield* completed(Order.poll(executionId))
        expect(result).toEqual(new Workflow.Complete({ exit: Exit.succeed("reserved:o-1:paid:42") }))
        // Body: start, after the deferred, after the clock (3 runs); each activity once.
        expect(counts).toMatchObject({ reserves: 1, ships: 1, compensations: 0 })
        expect(counts.bodies).toBeGreaterThanOrEqual(3)
        expect(yield* steps(Order._tag, executionId)).toEqual([
          { kind: "activity", name: "reserve" },
          { kind: "activity", name: "ship" },
          { kind: "clock", name: "cool-off" },
          { kind: "deferred", name: "Pg/Order/Paid" },
          { kind: "deferred", name: "DurableClock/cool-off" }
        ].sort((a, b) => a.kind.localeCompare(b.kind) || a.name.localeCompare(b.name)))
        // execute again: the recorded result, no new run.
        expect(yield* Order.execute({ id: "o-1" })).toBe("reserved:o-1:paid:42")
        expect((yield* execution(Order._tag, executionId))?.status).toBe("complete")
      }))

    it.effect("a start in the caller's transaction exists iff the transaction commits", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const rolledBack = yield* Order.executionId({ id: "o-rollback" })
        yield* sql.withTransaction(
          Effect.andThen(Order.execute({ id: "o-rollback" }, { discard: true }), Effect.fail("business rule"))
        ).pipe(Effect.flip)
        expect(yield* execution(Order._tag, rolledBack)).toBeUndefined()
        const committed = yield* sql.withTransaction(Order.execute({ id: "o-commit" }, { discard: true }))
        yield* eventually(Order.poll(committed), (r) => Option.isSome(r) && r.value._tag === "Suspended")
        expect(Option.isNone(yield* Order.poll(rolledBack))).toBe(true)
      }))

    it.effect("interrupt: the run ends interrupted, compensations run once, the pending clock is cleared", () =>
      Effect.gen(function*() {
        Object.assign(counts, { bodies: 0, reserves: 0, ships: 0, compensations: 0 })
        const executionId = yield* Order.execute({ id: "o-interrupt" }, { discard: true })
        yield* eventually(Order.poll(executionId), (r) => Option.isSome(r) && r.value._tag === "Suspended")
        yield* Order.interrupt(executionId)
        const result = yield* completed(Order.poll(executionId))
        expect(result._tag === "Complete" && Exit.hasInterrupts(result.exit)).toBe(true)
        expect(counts).toMatchObject({ reserves: 1, ships: 0, compensations: 1 })
        // A deferred completed after the end wakes nothing.
        const token = DurableDeferred.tokenFromExecutionId(Paid, { workflow: Order, executionId })
        yield* DurableDeferred.succeed(Paid, { token, value: 1 })
        expect((yield* execution(Order._tag, executionId))?.status).toBe("complete")
        // Interrupting a complete execution is a no-op.
        yield* Order.interrupt(executionId)
        expect(counts.compensations).toBe(1)
      }))

    it.effect("the same execution id with another payload: the first stands, the mismatch is counted", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        // Two starts of one id, the second with a payload the idempotency key does not see.
        const executionId = yield* Order.executionId({ id: "o-mismatch" })
        yield* Order.execute({ id: "o-mismatch" }, { discard: true })
        yield* sql`UPDATE durable.workflow_executions SET payload = '{"id":"o-mismatch","note":"x"}',
                   payload_fingerprint = 'other' WHERE execution_id = ${executionId}`.pipe(Effect.orDie)
        yield* Order.execute({ id: "o-mismatch" }, { discard: true })
        expect((yield* execution(Order._tag, executionId))?.payload_mismatches).toBe(1)
      }))
  })

  // A child workflow's completion wakes its parent.
  const Child = Workflow.make("Pg/Child", {
    payload: { n: Schema.Number },
    success: Schema.Number,
    idempotencyKey: ({ n }) => String(n)
  })
  const Parent = Workflow.make("Pg/Parent", {
    payload: {},
    success: Schema.Array(Schema.Number),
    idempotencyKey: () => "parent"
  })
  const FamilyLayer = Layer.mergeAll(
    Child.toLayer(({ n }) =>
      DurableClock.sleep({ name: "nap", duration: "200 millis", inMemoryThreshold: Duration.zero }).pipe(
        Effect.as(n * 10)
      )
    ),
    Parent.toLayer(() => Effect.forEach([1, 2, 3], (n) => Child.execute({ n }), { concurrency: "unbounded" }))
  )
  it.layer(FamilyLayer.pipe(Layer.provideMerge(engine())), { excludeTestServices: true })((it) => {
    it.effect("children suspended on clocks complete and wake their parent", () =>
      Effect.gen(function*() {
        expect(yield* Parent.execute({})).toEqual([10, 20, 30])
      }))
  })

  // A workflow whose first activity holds until the test opens it: to act on a run mid-way.
  const gated = (name: string) => {
    const gate = { open: undefined as undefined | (() => void), ran: 0, after: 0 }
    const workflow = Workflow.make(name, {
      payload: { id: Schema.String },
      success: Schema.Number,
      idempotencyKey: ({ id }) => id
    })
    const layer = workflow.toLayer(() =>
      Effect.gen(function*() {
        const first = yield* Activity.make({
          name: "slow",
          success: Schema.Number,
          execute: Effect.suspend(() => {
            gate.ran++
            return gate.ran === 1
              ? Effect.callback<number>((resume) => {
                gate.open = () => resume(Effect.succeed(1))
              })
              : Effect.succeed(2)
          })
        })
        yield* Activity.make({ name: "after", execute: Effect.sync(() => void gate.after++) })
        return first
      })
    )
    return { gate, workflow, layer }
  }
  const taken = gated("Pg/Fenced")
  const lapsed = gated("Pg/Lapsed")
  const interrupted = gated("Pg/InterruptedMidRun")
  // A body that waits between two activities, outside any (its run holds, nothing is recorded).
  const between = { open: undefined as undefined | (() => void), second: 0 }
  const Between = Workflow.make("Pg/InterruptedBetween", {
    payload: { id: Schema.String },
    idempotencyKey: ({ id }) => id
  })
  const BetweenLayer = Between.toLayer(() =>
    Effect.gen(function*() {
      yield* Activity.make({ name: "first", execute: Effect.void })
      yield* Effect.callback<void>((resume) => {
        between.open = () => resume(Effect.void)
      })
      yield* Activity.make({ name: "second", execute: Effect.sync(() => void between.second++) })
    })
  )
  const runTopicOf = (workflow: Workflow.Any) => `workflow.run:${workflow._tag}`
  it.layer(
    Layer.mergeAll(taken.layer, lapsed.layer, interrupted.layer, BetweenLayer).pipe(
      Layer.provideMerge(engine({ lease: "2 seconds" }))
    ),
    { excludeTestServices: true }
  )((it) => {
    it.effect("a runner whose claim was taken over writes nothing; the execution completes on the next run", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { gate, workflow } = taken
        const executionId = yield* workflow.execute({ id: "f-1" }, { discard: true })
        yield* eventually(Effect.sync(() => gate.open), (open) => open !== undefined)
        // Another claimer's generation on the run message, as after a lease lost to a stall.
        yield* sql`UPDATE durable.outbox SET claim_generation = claim_generation + 1, claimed_by = 'someone-else'
                    WHERE topic = ${runTopicOf(workflow)} AND projected_at IS NULL`.pipe(Effect.orDie)
        gate.open!()
        // The first run recorded its activity (at least once) but could not settle; the row
        // stays running until the taken-over claim's lease runs out and a new run replays.
        const result = yield* completed(workflow.poll(executionId))
        expect(result).toEqual(new Workflow.Complete({ exit: Exit.succeed(1) }))
        expect(gate.ran).toBe(1)
        expect((yield* execution(workflow._tag, executionId))?.runs).toBe(2)
      }))

    it.effect("a run whose lease lapsed with nobody else holding it settles nothing and is not marked; it replays", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const { gate, workflow } = lapsed
        const executionId = yield* workflow.execute({ id: "l-1" }, { discard: true })
        yield* eventually(Effect.sync(() => gate.open), (open) => open !== undefined)
        // The lease ran out (a frozen event loop, say), and no other worker has claimed it.
        yield* sql`UPDATE durable.outbox SET claimed_until = now() - interval '1 second'
                    WHERE topic = ${runTopicOf(workflow)} AND projected_at IS NULL`.pipe(Effect.orDie)
        gate.open!()
        const result = yield* completed(workflow.poll(executionId))
        expect(result).toEqual(new Workflow.Complete({ exit: Exit.succeed(1) }))
        expect((yield* execution(workflow._tag, executionId))?.runs).toBe(2)
      }))

    it.effect("an interrupt asked while a run is under way stops it before its next activity", () =>
      Effect.gen(function*() {
        const { gate, workflow } = interrupted
        const executionId = yield* workflow.execute({ id: "i-1" }, { discard: true })
        yield* eventually(Effect.sync(() => gate.open), (open) => open !== undefined)
        yield* workflow.interrupt(executionId)
        gate.open!()
        const result = yield* completed(workflow.poll(executionId))
        expect(result._tag === "Complete" && Exit.hasInterrupts(result.exit)).toBe(true)
        expect(gate.after).toBe(0)
      }))

    it.effect("an interrupt asked while the body waits between two activities stops it before the second", () =>
      Effect.gen(function*() {
        const executionId = yield* Between.execute({ id: "b-1" }, { discard: true })
        yield* eventually(Effect.sync(() => between.open), (open) => open !== undefined)
        yield* Between.interrupt(executionId)
        between.open!()
        const result = yield* completed(Between.poll(executionId))
        expect(result._tag === "Complete" && Exit.hasInterrupts(result.exit)).toBe(true)
        expect(between.second).toBe(0)
      }))
  })

  // A deferred completed with a defect: stored as JSON, read back by the deferred's own schema.
  const Dies = Workflow.make("Pg/DeferredDefect", {
    payload: { id: Schema.String },
    success: Schema.String,
    idempotencyKey: ({ id }) => id
  })
  const Verdict = DurableDeferred.make("Pg/Verdict", { success: Schema.String })
  it.layer(Dies.toLayer(() => DurableDeferred.await(Verdict)).pipe(Layer.provideMerge(engine())), {
    excludeTestServices: true
  })((it) => {
    it.effect("a deferred completed with a defect fails the workflow with that defect, on every replay", () =>
      Effect.gen(function*() {
        const executionId = yield* Dies.execute({ id: "d-1" }, { discard: true })
        yield* eventually(Dies.poll(executionId), (r) => Option.isSome(r) && r.value._tag === "Suspended")
        const token = DurableDeferred.tokenFromExecutionId(Verdict, { workflow: Dies, executionId })
        yield* DurableDeferred.done(Verdict, { token, exit: Exit.die(new Error("card reader on fire")) })
        const result = yield* completed(Dies.poll(executionId))
        expect(result._tag === "Complete" && Exit.isFailure(result.exit) && String(result.exit.cause)).toMatch(
          /card reader on fire/
        )
      }))

    it.effect("execute that waits for a result is refused inside a transaction (only a start can commit with it)", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const exit = yield* Effect.exit(sql.withTransaction(Dies.execute({ id: "d-tx" })))
        expect(Exit.isFailure(exit) && String(exit.cause)).toMatch(/can only start it \(discard: true\)/)
      }))
  })
})

describe("PgWorkflowEngine: transactional activities", () => {
  /** Rows of the activities' own table, by what wrote them. */
  const written = (what: string) =>
    Effect.flatMap(
      SqlClient.SqlClient,
      (sql) =>
        sql<{ n: number }>`SELECT count(*)::int AS n FROM tx_effects WHERE what = ${what}`.pipe(
          Effect.map((rows) => rows[0]!.n),
          Effect.orDie
        )
    )
  const insert = (what: string) =>
    Effect.flatMap(SqlClient.SqlClient, (sql) => sql`INSERT INTO tx_effects (what) VALUES (${what})`).pipe(
      Effect.orDie,
      Effect.asVoid
    )
  const bodies = { book: 0, refuse: 0, raced: 0, lost: { cut: 0, serialization: 0 } }

  const Booking = Workflow.make("Pg/Booking", {
    payload: { id: Schema.String },
    success: Schema.String,
    idempotencyKey: ({ id }) => id
  })
  const Confirmed = DurableDeferred.make("Pg/Booking/Confirmed")
  const BookingLayer = Booking.toLayer(({ id }) =>
    Effect.gen(function*() {
      yield* Activity.make({
        name: "book",
        execute: Effect.andThen(Effect.sync(() => void bodies.book++), insert(`book:${id}`))
      }).pipe(PgWorkflowEngine.transactional)
      yield* DurableDeferred.await(Confirmed)
      // Writes, then fails: its writes roll back with it, its failure is recorded.
      const refused = yield* Activity.make({
        name: "refuse",
        error: Schema.String,
        execute: Effect.andThen(
          Effect.andThen(Effect.sync(() => void bodies.refuse++), insert(`refuse:${id}`)),
          Effect.fail("sold out")
        )
      }).pipe(
        PgWorkflowEngine.transactional,
        Effect.match({ onFailure: (error) => error, onSuccess: () => "not refused" })
      )
      return `booked, then ${refused}`
    })
  )

  // The first run of `race` blocks inside its transaction until the test lets it go.
  const raceGate: { open: (() => void) | undefined } = { open: undefined }
  const Race = Workflow.make("Pg/TxRace", { payload: { id: Schema.String }, idempotencyKey: ({ id }) => id })
  const RaceLayer = Race.toLayer(({ id }) =>
    Activity.make({
      name: "race",
      execute: Effect.andThen(
        insert(`race:${id}`),
        Effect.suspend(() =>
          ++bodies.raced === 1
            ? Effect.callback<void>((resume) => {
              raceGate.open = () => resume(Effect.void)
            })
            : Effect.void
        )
      )
    }).pipe(PgWorkflowEngine.transactional)
  )

  // A database failure inside the body, on its first call only: its connection cut (the
  // backend terminated mid-transaction, so even the rollback fails) or a serialization failure
  // (the connection lives on). Neither is the activity's result.
  const Lost = Workflow.make("Pg/TxLost", {
    payload: { id: Schema.String, how: Schema.Literals(["cut", "serialization"]) },
    success: Schema.String,
    idempotencyKey: ({ id }) => id
  })
  const LostLayer = Lost.toLayer(({ how, id }) =>
    Effect.as(
      Activity.make({
        name: "lost",
        execute: Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* insert(`lost:${id}`)
          if (++bodies.lost[how] > 1) return
          yield* how === "cut"
            ? sql`SELECT pg_terminate_backend(pg_backend_pid())`
            : sql`DO $$ BEGIN RAISE EXCEPTION 'could not serialize' USING ERRCODE = '40001'; END $$`
        }).pipe(Effect.orDie, Effect.asVoid)
      }).pipe(PgWorkflowEngine.transactional),
      `applied ${id}`
    )
  )

  it.layer(
    Layer.mergeAll(BookingLayer, RaceLayer, LostLayer).pipe(Layer.provideMerge(engine({ lease: "2 seconds" }))),
    {
      excludeTestServices: true
    }
  )((it) => {
    it.effect("its writes commit with its journal row: once across replays; a failed one leaves no writes and is recorded failed", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE IF NOT EXISTS tx_effects (what text NOT NULL)`.pipe(Effect.orDie)
        const executionId = yield* Booking.execute({ id: "b-1" }, { discard: true })
        yield* eventually(Booking.poll(executionId), (r) => Option.isSome(r) && r.value._tag === "Suspended")
        const token = DurableDeferred.tokenFromExecutionId(Confirmed, { workflow: Booking, executionId })
        yield* DurableDeferred.succeed(Confirmed, { token, value: undefined })
        const result = yield* completed(Booking.poll(executionId))
        expect(result).toEqual(new Workflow.Complete({ exit: Exit.succeed("booked, then sold out") }))
        expect(yield* written("book:b-1")).toBe(1)
        expect(bodies.book).toBe(1)
        expect(yield* written("refuse:b-1")).toBe(0)
        expect(bodies.refuse).toBe(1)
        const [refuse] = yield* sql<{ result: { exit: { _tag: string } } }>`
          SELECT result FROM durable.workflow_steps
           WHERE workflow = ${Booking._tag} AND execution_id = ${executionId} AND name = 'refuse'`.pipe(Effect.orDie)
        expect(refuse?.result.exit._tag).toBe("Failure")
      }))

    it.effect("two runs racing on one transactional activity apply it once: the second waits for the first's commit and takes its result", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE IF NOT EXISTS tx_effects (what text NOT NULL)`.pipe(Effect.orDie)
        const executionId = yield* Race.execute({ id: "r-1" }, { discard: true })
        yield* eventually(Effect.sync(() => raceGate.open), (open) => open !== undefined)
        // The first run's lease runs out while it is inside the activity: a second run begins.
        yield* sql`UPDATE durable.outbox SET claimed_until = now() - interval '1 second'
                    WHERE topic = ${`workflow.run:${Race._tag}`} AND projected_at IS NULL`.pipe(Effect.orDie)
        yield* eventually(execution(Race._tag, executionId), (row) => row !== undefined && row.runs >= 2)
        // The second run's journal insert waits on the first's row lock.
        yield* eventually(
          sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
                              WHERE wait_event_type = 'Lock' AND query LIKE '%workflow_steps%'`.pipe(
            Effect.map((rows) => rows[0]!.n),
            Effect.orDie
          ),
          (n) => n >= 1
        )
        raceGate.open!()
        yield* completed(Race.poll(executionId))
        expect(yield* written("race:r-1")).toBe(1)
        expect(bodies.raced).toBe(1)
      }))

    it.effect("a database failure inside one is not its result: its connection cut or its transaction refused, the run retries and applies it once", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE IF NOT EXISTS tx_effects (what text NOT NULL)`.pipe(Effect.orDie)
        for (const how of ["cut", "serialization"] as const) {
          const id = `l-${how}`
          const executionId = yield* Lost.execute({ id, how }, { discard: true })
          const result = yield* completed(Lost.poll(executionId))
          expect(result).toEqual(new Workflow.Complete({ exit: Exit.succeed(`applied ${id}`) }))
          expect(bodies.lost[how]).toBe(2)
          expect(yield* written(`lost:${id}`)).toBe(1)
          const [step] = yield* sql<{ result: { exit: { _tag: string } } }>`
            SELECT result FROM durable.workflow_steps
             WHERE workflow = ${Lost._tag} AND execution_id = ${executionId} AND name = 'lost'`.pipe(Effect.orDie)
          expect(step?.result.exit._tag).toBe("Success")
        }
      }))
  })
})

describe("PgWorkflowEngine: a process that starts executions and runs none", () => {
  const Greet = Workflow.make("Pg/Greet", {
    payload: { name: Schema.String },
    success: Schema.String,
    idempotencyKey: ({ name }) => name
  })
  // A layer per engine: a layer already built in this scope would be shared, not registered again.
  const greetLayer = () => Greet.toLayer(({ name }) => Effect.succeed(`hello ${name}`))
  it.layer(greetLayer().pipe(Layer.provideMerge(engine({ runs: false, workerId: "web-tier" }))), {
    excludeTestServices: true
  })((it) => {
    it.effect("runs: false starts and polls; a runner process runs the execution", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const executionId = yield* Greet.execute({ name: "ada" }, { discard: true })
        expect(yield* Greet.poll(executionId)).toEqual(Option.none())
        // A runner beside it (its own engine over the same substrate) runs it.
        const runner = greetLayer().pipe(
          Layer.provideMerge(PgWorkflowEngine.layer({ workerId: "runner", pollInterval: "200 millis" })),
          Layer.provideMerge(Layer.succeedContext(yield* Effect.context<never>()))
        )
        const result = yield* completed(Greet.poll(executionId)).pipe(Effect.provide(runner))
        expect(result).toEqual(new Workflow.Complete({ exit: Exit.succeed("hello ada") }))
        const claims = yield* sql<{ claimed_by: string }>`
          SELECT DISTINCT claimed_by FROM durable.outbox_messages WHERE topic = ${`workflow.run:${Greet._tag}`}`.pipe(
          Effect.orDie
        )
        expect(claims).toEqual([{ claimed_by: "runner" }])
        expect((yield* execution(Greet._tag, executionId))?.runs).toBe(1)
      }))
  })
})

describe("PgWorkflowEngine: strict payloads", () => {
  const Strict = Workflow.make("Pg/Strict", {
    payload: { id: Schema.String, note: Schema.optional(Schema.String) },
    idempotencyKey: ({ id }) => id
  })
  it.layer(Strict.toLayer(() => Effect.void).pipe(Layer.provideMerge(engine({ strictPayloads: true }))), {
    excludeTestServices: true
  })((it) => {
    it.effect("refuses a second start with another payload, as a defect naming the execution", () =>
      Effect.gen(function*() {
        yield* Strict.execute({ id: "s-1" }, { discard: true })
        yield* Strict.execute({ id: "s-1" }, { discard: true })
        const exit = yield* Effect.exit(Strict.execute({ id: "s-1", note: "changed" }, { discard: true }))
        expect(Exit.isFailure(exit) && String(exit.cause)).toMatch(/started before with another payload/)
      }))
  })
})

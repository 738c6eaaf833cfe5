/**
 * `npm run chaos [-- --quick] [--lease=5s] [--workers=4] [--messages=N] [--pooler] [--seed=N]`:
 * an embedded PostgreSQL of its own, a producer committing through the ledger and outbox
 * behind a commit-cutting proxy, N projector processes, the fault schedule, a drain, then the
 * checker. Prints the details and one summary line; exits 1 when an invariant broke, 2 on a
 * bad argument, 130 when interrupted. Whatever it started (processes, server, PgBouncer,
 * directories) it stops and deletes, however it ends.
 */
import * as Durable from "@effect-durable/pg/Durable"
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as QueueLifecycle from "@effect-durable/pg/QueueLifecycle"
import * as FlowChecker from "@effect-durable/testing/FlowChecker"
import * as PgServer from "@effect-durable/testing/PgServer"
import * as WorkflowLimits from "@effect-durable/workflow/WorkflowLimits"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Cause from "effect/Cause"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as SqlClient from "effect/sql/SqlClient"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import * as Checker from "./checker.js"
import * as Children from "./children.js"
import * as Faults from "./faults.js"
import * as FeedChaos from "./feeds/main.js"
import * as Options from "./options.js"
import * as Pooler from "./pooler.js"
import type { ProducerConfig } from "./producer.js"
import * as Proxy from "./proxy.js"
import * as Random from "./random.js"
import { APPLICATION, DDL, READY, TOPIC } from "./schema.js"
import * as Workers from "./workers.js"
import * as WorkflowChecker from "./workflows/checker.js"
import * as RollingDeploy from "./workflows/deploy.js"
import * as WorkflowSchema from "./workflows/schema.js"

const here = dirname(fileURLToPath(import.meta.url))
const DATABASE = "chaos"
const ROLLBACK_SHARE = 0.1
const PRODUCER_CONCURRENCY = 16

class InvariantBroken extends Error {}

let options: Options.Options
try {
  options = Options.parse(process.argv.slice(2))
} catch (error) {
  console.error(`${error instanceof Error ? error.message : String(error)}\n${Options.USAGE}`)
  process.exit(2)
}
const leaseMillis = options.leaseMillis ?? Options.PROJECTOR_DEFAULT_LEASE_MILLIS
// Long enough for a stalled worker's leases to expire and its messages to be taken over.
const drainMillis = Math.max(120_000, 4 * leaseMillis + 60_000)

const started = Date.now()
const log = (line: string) => console.log(`[${((Date.now() - started) / 1000).toFixed(0).padStart(4)} s] ${line}`)

/** Creates the run's database, migrates the substrate into it and adds the chaos tables. */
const prepareDatabase = (server: PgServer.PgServer["Service"]) =>
  Effect.gen(function*() {
    yield* Effect.promise(() => Children.createDatabase(server, DATABASE, APPLICATION.admin))
    const context = yield* Layer.build(
      PgClient.layer({ url: server.url(DATABASE), applicationName: APPLICATION.admin, maxConnections: 4 })
    )
    const admin = Context.get(context, SqlClient.SqlClient)
    const substrate = yield* Layer.build(Durable.layerOver({ migrate: true })).pipe(
      Effect.provideService(SqlClient.SqlClient, admin)
    )
    for (const statement of options.workflows ? WorkflowSchema.DDL : DDL) yield* admin.unsafe(statement)
    if (options.limits || options.slots) {
      // Set before any claim: the checker then sees every claim of the topic.
      yield* FlowChecker.install().pipe(Effect.provideService(SqlClient.SqlClient, admin))
      yield* Context.get(substrate, FlowControl.FlowControl).setLimit(
        limitedTopic,
        options.workflows
          ? { maxInFlight: Options.WORKFLOW_FLOW_LIMIT, groupMaxInFlight: Options.WORKFLOW_GROUP_LIMIT, by: "chaos" }
          : options.slots
          ? { maxInFlight: Options.FLOW_LIMIT, by: "chaos" }
          : {
            maxInFlight: Options.FLOW_LIMIT,
            groupMaxInFlight: Options.FLOW_GROUP_LIMIT,
            rate: Options.FLOW_RATE,
            groupRate: Options.FLOW_GROUP_RATE,
            by: "chaos"
          }
      )
    }
    return admin
  })

/** Counts for the progress line; "database down" while it is. */
const progress = (admin: SqlClient.SqlClient) =>
  admin<{ committed: number; rolled_back: number; delivered: number; deliveries: number; open: number; dead: number }>`
    SELECT (SELECT count(*)::int FROM chaos.orders) AS committed,
           (SELECT count(*)::int FROM chaos.rolled_back) AS rolled_back,
           (SELECT count(DISTINCT message_id)::int FROM chaos.deliveries) AS delivered,
           (SELECT count(*)::int FROM chaos.deliveries) AS deliveries,
           (SELECT count(*)::int FROM durable.outbox WHERE ${admin.literal(QueueLifecycle.outbox.open)}) AS open,
           (SELECT count(*)::int FROM durable.outbox_dead WHERE ${
    admin.literal(QueueLifecycle.outbox.is.dead)
  }) AS dead`
    .pipe(
      Effect.map(([row]) =>
        `committed ${row!.committed} (rolled back ${row!.rolled_back}), delivered ${row!.delivered} (${
          row!.deliveries
        } deliveries), open ${row!.open}, dead ${row!.dead}`
      ),
      Effect.timeout("5 seconds"),
      Effect.orElseSucceed(() => "database unreachable")
    )

/** The workflow schedule's progress line. */
const workflowProgress = (admin: SqlClient.SqlClient) =>
  admin<{ started: number; rolled_back: number; complete: number; executions: number; runs: number; open: number }>`
    SELECT (SELECT count(*)::int FROM chaos.wf_orders) AS started,
           (SELECT count(*)::int FROM chaos.wf_rolled_back) AS rolled_back,
           (SELECT count(*) FILTER (WHERE status = 'complete')::int FROM durable.workflow_executions) AS complete,
           (SELECT count(*)::int FROM durable.workflow_executions) AS executions,
           (SELECT coalesce(sum(runs), 0)::int FROM durable.workflow_executions) AS runs,
           (SELECT count(*)::int FROM durable.outbox WHERE ${admin.literal(QueueLifecycle.outbox.open)}) AS open`
    .pipe(
      Effect.map(([row]) =>
        `started ${row!.started} (rolled back ${row!.rolled_back}), complete ${row!.complete} of ${
          row!.executions
        } executions (${row!.runs} runs), open run and clock messages ${row!.open}`
      ),
      Effect.timeout("5 seconds"),
      Effect.orElseSucceed(() => "database unreachable")
    )

/** Work still to do: open messages (and, for workflows, executions not complete). */
const openMessages = (admin: SqlClient.SqlClient) =>
  admin<{ n: number }>`
    SELECT (SELECT count(*)::int FROM durable.outbox WHERE ${admin.literal(QueueLifecycle.outbox.open)}) +
           ${
    options.workflows
      // A diverged execution waits for an operator (`--deploy`): not work the drain waits for.
      ? admin`(SELECT count(*)::int FROM durable.workflow_executions
                WHERE status <> 'complete' AND NOT coalesce(waiting_on @> '[{"kind":"diverged"}]', false))`
      : admin`0`
  } AS n`
    .pipe(
      Effect.map(([row]) => row!.n)
    )

/** The topic under limits with `--limits` or `--slots`: the outbox schedule's, or the workflow's runs. */
const limitedTopic = options.workflows ? WorkflowLimits.topic(WorkflowSchema.ChaosOrder) : TOPIC
const limitsText = Options.limitsText(options)

/**
 * `--limits`: the overshoot checker's findings (it counted in flight inside every claim of the
 * topic, and held every span of claimed messages against the topic's and each group's bucket).
 */
const withFlowCheck = <R extends { readonly details: ReadonlyArray<string>; readonly broken: ReadonlyArray<string> }>(
  admin: SqlClient.SqlClient,
  report: R
) =>
  Effect.gen(function*() {
    const overshoots = yield* FlowChecker.overshoots().pipe(Effect.provideService(SqlClient.SqlClient, admin))
    const rateOvershoots = yield* FlowChecker.rateOvershoots().pipe(Effect.provideService(SqlClient.SqlClient, admin))
    const [claims] = yield* admin<{ n: number }>`
      SELECT coalesce(sum(attempt_count), 0)::int AS n FROM durable.outbox_messages WHERE topic = ${limitedTopic}`
    const line = `flow limits (${limitsText}): ${overshoots.length} overshoots over about ${
      claims!.n
    } claims of ${limitedTopic}, each counted inside its claim`
    const rateLine = `rates (${Options.rateText(Options.FLOW_RATE)}, ${
      Options.rateText(Options.FLOW_GROUP_RATE)
    } per group): ${rateOvershoots.length} buckets overshot, every span of claimed messages checked`
    return {
      ...report,
      details: [...report.details, line, ...(options.slots || options.workflows ? [] : [rateLine])],
      broken: [
        ...report.broken,
        ...(overshoots.length === 0
          ? []
          : [`flow limit overshoots: ${overshoots.length} (first: ${JSON.stringify(overshoots[0])})`]),
        ...(rateOvershoots.length === 0 ? [] : [`rate overshoots: ${JSON.stringify(rateOvershoots)}`])
      ]
    }
  })

const program = Effect.gen(function*() {
  const random = Random.make(options.seed)
  const schedule = Faults.plan(options.quick, leaseMillis, random)
  const productionMillis = Faults.productionMillis(options.quick, schedule)
  // Outbox commands: about 100 a second; workflows (each several runs): 5 a second.
  const messages = options.messages ?? Math.round(productionMillis / (options.workflows ? 200 : 10))
  log(
    `effect-durable chaos (${options.workflows ? "workflows, " : ""}${
      options.quick ? "quick" : "full"
    }): seed ${options.seed}, ${messages} ${options.workflows ? "workflows" : "messages"} over ${
      productionMillis / 1000
    } s, ${schedule.length} faults, ${options.workers} workers, lease ${
      options.leaseMillis === undefined ? `${leaseMillis / 1000} s (projector default)` : `${leaseMillis / 1000} s`
    }${options.pooler ? ", through PgBouncer (transaction mode)" : ""}${
      options.asyncWorkerCommits ? ", worker commits asynchronous" : ""
    }${
      options.batch ? `, batch handler (up to ${Options.BATCH.maxSize} a call, max wait ${Options.BATCH.maxWait})` : ""
    }${options.limits || options.slots ? `, flow limits on ${limitedTopic}: ${limitsText}` : ""}${
      options.deploy ? ", a rolling deploy of the workflow's code (A to B)" : ""
    }`
  )
  const server = yield* PgServer.PgServer
  const run = yield* Effect.acquireRelease(
    Effect.sync(() => Children.runDirectory("effect-durable-chaos-")),
    (run) => Effect.sync(() => run.dispose(options.keep))
  )
  if (options.keep) log(`run directory (kept): ${run.path}`)
  const admin = yield* prepareDatabase(server)
  const direct = Redacted.value(server.url(DATABASE))

  const pooler = options.pooler
    ? Option.some(
      yield* Effect.acquireRelease(
        Effect.promise(() => Pooler.start(run, direct)),
        (pooler) => Effect.promise(() => pooler.stop().catch(() => undefined))
      )
    )
    : Option.none()
  const poolUrl = Option.match(pooler, { onNone: () => direct, onSome: (pooler) => pooler.url })
  if (Option.isSome(pooler)) log(`PgBouncer at ${new URL(poolUrl).host}`)

  const upstream = new URL(poolUrl)
  const proxy = yield* Effect.acquireRelease(
    Effect.promise(() => Proxy.start({ host: upstream.hostname, port: Number(upstream.port) })),
    (proxy) => Effect.promise(proxy.close)
  )
  const producerUrl = new URL(poolUrl)
  producerUrl.port = String(proxy.port)

  const versions = new Map<number, WorkflowSchema.CodeVersion>()
  const workers = yield* Effect.acquireRelease(
    Effect.sync(() =>
      Workers.start(
        run,
        join(here, options.workflows ? "workflows/worker.js" : "worker.js"),
        options.workers,
        (index, workerId) => ({
          index,
          workerId,
          url: poolUrl,
          ...(Option.isSome(pooler) ? { listenUrl: direct } : {}),
          ...(options.leaseMillis === undefined ? {} : { leaseMillis: options.leaseMillis }),
          ...(options.asyncWorkerCommits ? { asyncWorkerCommits: true } : {}),
          ...(options.batch ? { batch: true } : {}),
          ...(options.deploy ? { version: versions.get(index) ?? "A" } : {})
        })
      )
    ),
    (workers) => Effect.promise(workers.shutdown)
  )
  // The first faults come early: wait until every worker's projector runs.
  yield* Effect.sync(() => workers.slots.every((slot) => slot.child.logTail(20).includes(READY))).pipe(
    Effect.repeat({ until: (ready) => ready, schedule: Schedule.spaced("100 millis") }),
    Effect.timeout("30 seconds"),
    Effect.ignore
  )
  log(`${options.workers} workers up (${workers.slots.map((slot) => slot.workerId).join(", ")}); producing`)

  const journal = join(run.path, "producer-journal.jsonl")
  const producerConfig: ProducerConfig = {
    url: producerUrl.toString(),
    pooled: Option.isSome(pooler),
    messages,
    productionMillis,
    concurrency: PRODUCER_CONCURRENCY,
    rollbackShare: ROLLBACK_SHARE,
    seed: options.seed,
    journal,
    ...(options.limits ? { groups: Options.FLOW_GROUPS } : {})
  }
  const producer = yield* Effect.acquireRelease(
    Effect.sync(() =>
      Children.spawnNode(
        run,
        "producer",
        join(here, options.workflows ? "workflows/producer.js" : "producer.js"),
        producerConfig
      )
    ),
    (producer) => Effect.promise(() => Children.stop(producer, 5_000))
  )
  const productionStartedAt = Date.now()

  const progressLine = options.workflows ? workflowProgress : progress
  yield* progressLine(admin).pipe(
    Effect.flatMap((line) => Effect.sync(() => log(line))),
    Effect.schedule(Schedule.spaced("10 seconds")),
    Effect.forkScoped
  )
  const env: Faults.Environment = { workers, server, proxy, admin, leaseMillis, random, commitCuts: 0 }
  const faults = yield* Effect.forkScoped(
    Faults.run(
      env,
      schedule,
      productionStartedAt,
      (fault) => log(`fault ${fault.kind}: ${fault.skipped ? "skipped, " : ""}${fault.detail}`)
    )
  )

  const deploy = yield* Effect.forkScoped(
    options.deploy
      ? RollingDeploy.run({ workers, url: direct, versions, startedAt: productionStartedAt, productionMillis, log })
      : Effect.succeed(undefined)
  )
  const incomplete: Array<string> = []
  const producerEnd = yield* Effect.promise(() => producer.exited).pipe(
    Effect.timeout(Duration.millis(productionMillis + 180_000)),
    Effect.option
  )
  if (Option.isNone(producerEnd)) incomplete.push("the producer did not finish in time")
  else if (producerEnd.value.code !== 0) {
    incomplete.push(
      `the producer failed (${producerEnd.value.signal ?? producerEnd.value.code}): ${producer.logTail(5)}`
    )
  }
  log(`producer done; waiting for the faults to end`)
  const faultRecords = yield* Fiber.join(faults)
  const deployed = yield* Fiber.join(deploy)

  log(`draining (at most ${drainMillis / 1000} s)`)
  const drained = yield* openMessages(admin).pipe(
    Effect.orElseSucceed(() => -1),
    Effect.repeat({ until: (n) => n === 0, schedule: Schedule.spaced("1 second") }),
    Effect.timeout(Duration.millis(drainMillis)),
    Effect.option
  )
  if (Option.isNone(drained)) incomplete.push(`messages still open after the ${drainMillis / 1000} s drain`)
  log(yield* progressLine(admin))
  // No delivery may happen while the checker reads.
  yield* Effect.promise(workers.shutdown)
  log(`workers stopped; checking every message`)

  const checked = yield* (options.workflows ? WorkflowChecker.check : Checker.check)(admin, {
    journal,
    productionStartedAt,
    faults: faultRecords,
    leaseMillis,
    unexpectedExits: workers.unexpectedExits(),
    incomplete,
    ...(deployed === undefined ? {} : { deployed })
  })
  const report = options.limits || options.slots ? yield* withFlowCheck(admin, checked) : checked
  console.log("")
  for (const line of report.details) console.log(line)
  console.log(report.broken.length === 0 ? "invariants: all hold" : `invariants BROKEN: ${report.broken.join("; ")}`)
  console.log((options.workflows ? WorkflowChecker.summary : Checker.summary)(report))
  if (report.broken.length > 0) return yield* Effect.fail(new InvariantBroken(report.broken.join("; ")))
}).pipe(
  Effect.scoped,
  // A server of its own: the restart fault needs one it owns. synchronous_commit on: an
  // immediate stop must not lose what was acknowledged (the test default turns it off).
  Effect.provide(PgServer.layerEmbedded({ settings: { synchronous_commit: "on" } }))
)

NodeRuntime.runMain(options.feeds ? FeedChaos.program(options) : program, {
  disableErrorReporting: true,
  teardown: (exit, onExit) => {
    if (Exit.isSuccess(exit)) return onExit(0)
    if (Cause.hasInterruptsOnly(exit.cause)) {
      console.error("chaos: interrupted; everything it started is stopped and deleted")
      return onExit(130)
    }
    const failure = Cause.squash(exit.cause)
    if (!(failure instanceof InvariantBroken || failure instanceof FeedChaos.Broken)) {
      console.error(`chaos: ${Cause.pretty(exit.cause)}`)
    }
    onExit(1)
  }
})

/**
 * `npm run chaos -- --feeds [--quick] [--seed=N] [--keep]`: the commit-ordered feed under
 * faults, and the relay beside it. Writers enqueue on one topic (some holding their commits
 * open, some rolling back), three consumers each run in two processes, two relay processes
 * publish the topic from one replication slot into JetStream, and the schedule kills consumer,
 * relay and writer processes and restarts PostgreSQL in immediate mode; then every consumer and
 * the relay drain and the checker (`checker.ts`) holds what each applied, and the stream,
 * against what the writers were told.
 */
import * as Nats from "@effect-durable/nats/Nats"
import * as Durable from "@effect-durable/pg/Durable"
import * as Feed from "@effect-durable/pg/Feed"
import * as OutboxLog from "@effect-durable/pg/OutboxLog"
import * as NatsServer from "@effect-durable/testing/NatsServer"
import * as PgServer from "@effect-durable/testing/PgServer"
import * as PgClient from "@effect/sql-pg/PgClient"
import { StorageType } from "@nats-io/jetstream"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import * as SqlClient from "effect/sql/SqlClient"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import * as Children from "../children.js"
import type { Options } from "../options.js"
import * as Random from "../random.js"
import * as Checker from "./checker.js"
import {
  APPLICATION,
  type ConsumerConfig,
  CONSUMERS,
  DDL,
  PROCESSES_PER_CONSUMER,
  type RelayConfig,
  RELAYS,
  SLOT,
  STREAM,
  TOPIC,
  type WriterConfig,
  WRITERS
} from "./schema.js"

const here = dirname(fileURLToPath(import.meta.url))
const DATABASE = "chaos_feed"

export class Broken extends Error {}

type Fault = "kill-consumer" | "kill-writer" | "kill-relay" | "restart"

/** Quick: each fault twice, 6 s apart; full: one every 8-16 s for ten minutes. */
const plan = (quick: boolean, random: Random.Random): ReadonlyArray<Fault> =>
  quick
    ? ["kill-consumer", "kill-writer", "kill-relay", "restart", "kill-consumer", "kill-writer", "kill-relay", "restart"]
    : Array.from(
      { length: 50 },
      () => random.pick<Fault>(["kill-consumer", "kill-consumer", "kill-writer", "kill-relay", "restart"])
    )

export const program = (options: Options) =>
  Effect.gen(function*() {
    const started = Date.now()
    const log = (line: string) => console.log(`[${((Date.now() - started) / 1000).toFixed(0).padStart(4)} s] ${line}`)
    const random = Random.make(options.seed)
    const faults = plan(options.quick, random)
    const gapMillis = () => options.quick ? 6_000 : random.between(8_000, 16_000)
    log(
      `effect-durable chaos (feeds, ${
        options.quick ? "quick" : "full"
      }): seed ${options.seed}, ${WRITERS} writers, ${CONSUMERS.length} consumers x ${PROCESSES_PER_CONSUMER} processes, ${faults.length} faults`
    )
    const server = yield* PgServer.PgServer
    const run = yield* Effect.acquireRelease(
      Effect.sync(() => Children.runDirectory("effect-durable-chaos-feed-")),
      (run) => Effect.sync(() => run.dispose(options.keep))
    )
    yield* Effect.promise(() => Children.createDatabase(server, DATABASE, APPLICATION.admin))
    const url = Redacted.value(server.url(DATABASE))
    const context = yield* Layer.build(
      Durable.layerOver({ migrate: true }).pipe(
        Layer.provideMerge(
          PgClient.layer({ url: server.url(DATABASE), applicationName: APPLICATION.admin, maxConnections: 4 })
        )
      )
    )
    const admin = Context.get(context, SqlClient.SqlClient)
    const feed = Context.get(context, Feed.Feed)
    for (const statement of DDL) yield* admin.unsafe(statement)
    for (const consumer of CONSUMERS) yield* feed.register(consumer, { topics: [TOPIC] })
    // The relay's stream (deduplicating by message id for longer than the run) and its slot,
    // made before any writer starts: every message is in the slot's stream.
    const nats = yield* Layer.build(Nats.layer({ servers: (yield* NatsServer.NatsServer).url }))
    const { manager } = Context.get(nats, Nats.Nats)
    yield* Effect.promise(() =>
      manager.streams.add({
        name: STREAM,
        subjects: [TOPIC],
        storage: StorageType.File,
        duplicate_window: 3_600_000_000_000 // an hour, in nanoseconds
      })
    )
    yield* Effect.flatMap(OutboxLog.make, (outboxLog) => outboxLog.ensure(SLOT, [TOPIC])).pipe(Effect.provide(context))

    const productionMillis = (faults.length + 1) * (options.quick ? 6_000 : 12_000)
    const until = Date.now() + productionMillis
    const journals: Array<string> = []
    const spawnWriter = (index: number) => {
      const journal = join(run.path, `writer-${index}-${journals.length}.jsonl`)
      journals.push(journal)
      const config: WriterConfig = { url, index, seed: options.seed + 1_000 * (journals.length + 1), until, journal }
      return Children.spawnNode(run, `writer-${index}-${journals.length}`, join(here, "writer.js"), config)
    }
    const spawnConsumer = (index: number) => {
      const consumer = CONSUMERS[index % CONSUMERS.length]!
      const config: ConsumerConfig = { url, index, consumer, process: `${consumer}#${index}` }
      return Children.spawnNode(run, `consumer-${index}`, join(here, "consumer.js"), config)
    }
    const natsUrl = (yield* NatsServer.NatsServer).url
    const spawnRelay = (index: number) => {
      const config: RelayConfig = { url, index, nats: natsUrl }
      return Children.spawnNode(run, `relay-${index}`, join(here, "relay.js"), config)
    }
    const writers = Array.from({ length: WRITERS }, (_, i) => spawnWriter(i))
    const consumers = Array.from({ length: CONSUMERS.length * PROCESSES_PER_CONSUMER }, (_, i) => spawnConsumer(i))
    const relays = Array.from({ length: RELAYS }, (_, i) => spawnRelay(i))
    yield* Effect.addFinalizer(() =>
      Effect.promise(() =>
        Promise.all([...writers, ...consumers, ...relays].map((child) => Children.stop(child, 3_000)))
      )
    )
    // A process that died (killed, or at a restart while it started) is started again.
    yield* Effect.sync(() => {
      for (const [i, child] of consumers.entries()) if (!child.running()) consumers[i] = spawnConsumer(i)
      for (const [i, child] of relays.entries()) if (!child.running()) relays[i] = spawnRelay(i)
      if (Date.now() < until) {
        for (const [i, child] of writers.entries()) if (!child.running()) writers[i] = spawnWriter(i)
      }
    }).pipe(Effect.delay("500 millis"), Effect.forever, Effect.forkScoped)

    const records: Array<string> = []
    for (const fault of faults) {
      yield* Effect.sleep(Duration.millis(gapMillis()))
      if (fault === "restart") {
        const down = random.between(1_000, 3_000)
        const result = yield* Effect.result(server.restartWith({ mode: "immediate", downtime: Duration.millis(down) }))
        records.push(
          `restart: immediate stop, down ${(down / 1000).toFixed(1)} s${result._tag === "Failure" ? " (failed)" : ""}`
        )
      } else {
        const group = fault === "kill-writer" ? writers : fault === "kill-relay" ? relays : consumers
        const victim = random.between(0, group.length - 1)
        group[victim]!.signal("SIGKILL")
        records.push(`${fault}: SIGKILL of ${group[victim]!.name}`)
      }
      log(records[records.length - 1]!)
    }
    yield* Effect.sleep(Duration.millis(Math.max(0, until - Date.now())))
    const incomplete: Array<string> = []
    const writersDone = yield* Effect.promise(() => Promise.all(writers.map((w) => w.exited))).pipe(
      Effect.timeout("30 seconds"),
      Effect.option
    )
    if (Option.isNone(writersDone)) incomplete.push("the writers did not stop")
    log("writers done; draining the consumers and the relay")
    const drained = yield* feed.lag().pipe(
      Effect.flatMap((lags) =>
        Effect.map(
          admin<{ n: number; open: number }>`
            SELECT count(*)::int AS n, count(*) FILTER (WHERE projected_at IS NULL AND dead_at IS NULL)::int AS open
              FROM durable.outbox_messages WHERE topic = ${TOPIC}`,
          ([row]) => row!.open === 0 && lags.every((lag) => lag.read === row!.n && lag.readable === 0 && lag.held === 0)
        )
      ),
      Effect.orElseSucceed(() => false),
      Effect.repeat({ until: (done) => done, schedule: Schedule.spaced("500 millis") }),
      Effect.timeout("120 seconds"),
      Effect.option
    )
    if (Option.isNone(drained)) {
      incomplete.push("the consumers did not read every message, or the relay did not publish them all, within 120 s")
    }
    yield* Effect.promise(() => Promise.all([...consumers, ...relays].map((child) => Children.stop(child, 3_000))))
    const stream = yield* Effect.promise(async () => {
      const count = (await manager.streams.info(STREAM)).state.messages
      const messages: Array<{ uid: string; id: string }> = []
      for (let seq = 1; seq <= count; seq++) {
        const stored = await manager.streams.getMessage(STREAM, { seq })
        messages.push({ uid: (stored!.json() as { uid: string }).uid, id: stored!.header.get("Nats-Msg-Id") })
      }
      return messages
    })
    const report = yield* Checker.check(admin, { journals, faults: records, incomplete, stream })
    console.log("")
    for (const line of report.details) console.log(line)
    console.log(report.broken.length === 0 ? "invariants: all hold" : `invariants BROKEN: ${report.broken.join("; ")}`)
    console.log(report.summary)
    if (report.broken.length > 0) return yield* Effect.fail(new Broken(report.broken.join("; ")))
  }).pipe(
    Effect.scoped,
    Effect.provide(
      Layer.merge(
        PgServer.layerEmbedded({ settings: { synchronous_commit: "on", wal_level: "logical" } }),
        NatsServer.layer
      )
    )
  )

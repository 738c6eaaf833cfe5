/**
 * The checks of `effect-durable doctor`, each an Effect that never fails (a check that cannot
 * run says why, as a warning): the schema's version and drift, whether NOTIFY reaches a
 * listener, whether a transaction pooler sits between us and PostgreSQL, dead tuples of the
 * substrate's tables, the oldest snapshot holding back vacuum, and the oldest writing
 * transaction holding back the feeds.
 */
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Feed from "@effect-durable/pg/Feed"
import * as Migrations from "@effect-durable/pg/Migrations"
import * as OutboxLog from "@effect-durable/pg/OutboxLog"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as SqlClient from "effect/sql/SqlClient"
import { randomBytes } from "node:crypto"
import { age, count, plural } from "./output.js"

export interface Check {
  readonly name: string
  readonly status: "ok" | "warn" | "fail"
  readonly detail: string
}

const ok = (name: string, detail: string): Check => ({ name, status: "ok", detail })
const warn = (name: string, detail: string): Check => ({ name, status: "warn", detail })
const fail = (name: string, detail: string): Check => ({ name, status: "fail", detail })

/** A check whose own failure (permissions, a timeout) is reported as a warning. */
const guarded = <R>(name: string, check: Effect.Effect<Check, unknown, R>): Effect.Effect<Check, never, R> =>
  Effect.catch(
    check,
    (error) =>
      Effect.succeed(warn(name, `could not check: ${(error as { message?: string })?.message ?? String(error)}`))
  )

const version = guarded(
  "schema version",
  Effect.gen(function*() {
    const { found, needed, schema } = yield* Migrations.schemaVersion
    if (found === needed) return ok("schema version", `${schema} is at version ${found}, this release's`)
    return found < needed
      ? fail(
        "schema version",
        `${schema} is at version ${found}, this release needs ${needed}: run effect-durable migrate`
      )
      : fail("schema version", `${schema} is at version ${found}, newer than this release knows (${needed})`)
  })
)

const drift = guarded(
  "schema drift",
  Effect.gen(function*() {
    const differences = yield* Migrations.verifySchema
    return differences.length === 0
      ? ok("schema drift", "none: the tables, indexes, constraints and functions are what the migrations build")
      : fail(
        "schema drift",
        `${plural(differences.length, "difference")}: ${
          differences.slice(0, 5).map((d) => `${d.kind} ${d.object}`).join(", ")
        }${differences.length > 5 ? ", ..." : ""} (effect-durable verify lists them)`
      )
  })
)

const listen = guarded(
  "LISTEN/NOTIFY",
  Effect.scoped(Effect.gen(function*() {
    const client = yield* Effect.serviceOption(PgClient.PgClient)
    if (Option.isNone(client)) {
      return warn("LISTEN/NOTIFY", "not checked: the SqlClient is not @effect/sql-pg's PgClient")
    }
    const pg = client.value
    const sql = yield* SqlClient.SqlClient
    const channel = `effect_durable_doctor_${randomBytes(6).toString("hex")}`
    // `listen` returns once PostgreSQL confirmed the LISTEN: one NOTIFY (on another session) must arrive.
    const notifications = yield* pg.listen(channel)
    yield* sql`SELECT pg_notify(${channel}, 'ping')`
    const heard = yield* Queue.take(notifications).pipe(Effect.timeout("3 seconds"), Effect.option)
    return Option.isSome(heard)
      ? ok("LISTEN/NOTIFY", "a notification arrived: projectors wake at commit")
      : warn(
        "LISTEN/NOTIFY",
        "no notification within 3 s (a transaction pooler in between?): projectors fall back to their poll interval; give them a direct listenUrl"
      )
  }))
)

const pooler = guarded(
  "pooler",
  Effect.scoped(Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const connection = yield* sql.reserve
    const pids = new Set<number>()
    for (let i = 0; i < 6; i++) {
      const rows = yield* connection.executeUnprepared("SELECT pg_backend_pid() AS pid", [], undefined)
      pids.add((rows[0] as { pid: number }).pid)
    }
    return pids.size === 1
      ? ok("pooler", "one server session per connection: direct, or a session pooler")
      : warn(
        "pooler",
        `6 statements on one connection ran on ${pids.size} server sessions: a transaction pooler (PgBouncer transaction mode). ` +
          "The substrate works behind it; LISTEN and explain need a direct URL"
      )
  }))
)

interface TableRow {
  readonly table: string
  readonly live: number
  readonly dead: number
  readonly bytes: number
  readonly vacuumed: string | null
}

const megabytes = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`

const bloat = guarded(
  "table bloat",
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* DurableSettings
    const rows = yield* sql<TableRow>`
      SELECT relname AS table, n_live_tup::float8 AS live, n_dead_tup::float8 AS dead,
             pg_total_relation_size(relid)::float8 AS bytes,
             to_char(greatest(last_autovacuum, last_vacuum) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') AS vacuumed
        FROM pg_stat_user_tables
       WHERE schemaname = ${settings.schema} AND relname IN ('outbox', 'inbox', 'mutation_records')
       ORDER BY relname`
    if (rows.length === 0) return warn("table bloat", `no substrate tables in schema ${settings.schema}`)
    const ratio = (r: TableRow) => (r.live + r.dead === 0 ? 0 : r.dead / (r.live + r.dead))
    const bloated = rows.filter((r) => r.dead > 10_000 && ratio(r) > 0.2)
    const summary = rows.map((r) =>
      `${r.table} ${megabytes(r.bytes)}, ${count(r.live)} live, ${Math.round(ratio(r) * 100)}% dead tuples (vacuumed ${
        r.vacuumed ?? "never"
      })`
    ).join("; ")
    return bloated.length === 0
      ? ok("table bloat", summary)
      : warn(
        "table bloat",
        `${
          bloated.map((r) => r.table).join(", ")
        }: many dead tuples; is vacuum held back (see below) or autovacuum off? ${summary}`
      )
  })
)

const horizon = guarded(
  "oldest transaction",
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [oldest] = yield* sql<{ pid: number; app: string; state: string | null; seconds: number | null }>`
      SELECT pid, coalesce(application_name, '') AS app, state, extract(epoch FROM now() - xact_start)::float8 AS seconds
        FROM pg_stat_activity
       WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
       ORDER BY age(backend_xmin) DESC LIMIT 1`
    const slots = yield* sql<{ slot: string }>`
      SELECT slot_name AS slot FROM pg_replication_slots WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL`
    const prepared = yield* sql<{ gid: string; seconds: number }>`
      SELECT gid, extract(epoch FROM now() - prepared)::float8 AS seconds FROM pg_prepared_xacts ORDER BY prepared LIMIT 1`
    const notes = [
      ...slots.map((s) => `replication slot ${s.slot} holds an xmin`),
      ...prepared.map((p) => `prepared transaction ${p.gid} open for ${age(p.seconds)}`)
    ]
    if (oldest === undefined) {
      return notes.length === 0
        ? ok("oldest transaction", "no open snapshot holds back vacuum")
        : warn("oldest transaction", notes.join("; "))
    }
    const who = `pid ${oldest.pid}${oldest.app === "" ? "" : ` (${oldest.app})`}${
      oldest.state === null ? "" : `, ${oldest.state}`
    }`
    const text = `${who}, open for ${age(oldest.seconds)}`
    return (oldest.seconds ?? 0) > 300 || notes.length > 0
      ? warn(
        "oldest transaction",
        `${
          [text, ...notes].join("; ")
        }: vacuum cannot remove rows deleted since it began (end it: SELECT pg_terminate_backend(${oldest.pid}))`
      )
      : ok("oldest transaction", `${text}: vacuum is not held back`)
  })
)

/** What holds every feed back, in words. */
export const describeHolder = (holder: Feed.HorizonHolder) => {
  const session = holder.session
  const who = session !== null
    ? `pid ${session.pid}${session.applicationName ? ` (${session.applicationName})` : ""}${
      session.state === null ? "" : `, ${session.state}`
    }`
    : holder.prepared !== null
    ? `prepared transaction ${holder.prepared}`
    : "a session this role may not see (grant it pg_read_all_stats to see whose)"
  const open = holder.seconds === null ? "" : `, open for ${age(holder.seconds)}`
  return `transaction ${holder.xid} of ${who}${open}, ${plural(holder.transactionsBehind, "transaction")} behind`
}

/** How long a writing transaction may hold the feeds back before the doctor warns. */
export const FEED_HORIZON_WARNING_SECONDS = 60

const feedHorizon = guarded(
  "feed horizon",
  Effect.gen(function*() {
    const feed = yield* Feed.Feed
    const consumers = yield* feed.lag()
    if (consumers.length === 0) return ok("feed horizon", "no feed consumers")
    const holder = yield* feed.holder
    if (holder === null) return ok("feed horizon", "no transaction holds the feeds back")
    const held = consumers.reduce((n, c) => n + c.held, 0)
    const text = `${describeHolder(holder)}; ${plural(held, "message")} of the consumers' topics wait for it`
    return (holder.seconds ?? 0) > FEED_HORIZON_WARNING_SECONDS || (holder.seconds === null && held > 0)
      ? warn(
        "feed horizon",
        `${text}: no consumer reads past it until it ends${
          holder.session === null ? "" : ` (end it: SELECT pg_terminate_backend(${holder.session.pid}))`
        }`
      )
      : ok("feed horizon", text)
  })
)

/** WAL a relay's slot may keep before the doctor warns. */
export const SLOT_WAL_WARNING_BYTES = 1024 ** 3

const slots = guarded(
  "replication slots",
  Effect.gen(function*() {
    const log = yield* OutboxLog.make
    const all = yield* log.status()
    if (all.length === 0) return ok("replication slots", "no logical replication slots in this database")
    const lost = all.filter((slot) => slot.walStatus === "lost" || slot.invalidation !== null)
    if (lost.length > 0) {
      return fail(
        "replication slots",
        `${
          lost.map((slot) => `${slot.slot}${slot.invalidation === null ? "" : ` (${slot.invalidation})`}`).join(", ")
        } lost the WAL it needed (max_slot_wal_keep_size) or was invalidated: ` +
          "drop it (SELECT pg_drop_replication_slot(name)); a relay makes it again and publishes the open messages from the table"
      )
    }
    const text = all.map((slot) => `${slot.slot} keeps ${megabytes(slot.retainedBytes)}`).join(", ")
    const heavy = all.filter((slot) => slot.retainedBytes > SLOT_WAL_WARNING_BYTES || slot.walStatus === "unreserved")
    if (heavy.length > 0) {
      return warn(
        "replication slots",
        `${text}: ${heavy.map((slot) => slot.slot).join(", ")} is far behind (is its relay running?)`
      )
    }
    return all.some((slot) => slot.safeBytes === null)
      ? warn(
        "replication slots",
        `${text}; max_slot_wal_keep_size is unbounded: a relay away for long fills the disk (set it, e.g. '10GB')`
      )
      : ok("replication slots", text)
  })
)

/** Every check, in order; drift only when the version is right (it compares against this release). */
export const runChecks = Effect.gen(function*() {
  const first = yield* version
  const driftCheck = first.status === "ok"
    ? drift
    : Effect.succeed(warn("schema drift", "not checked: the version is not this release's"))
  const rest = yield* Effect.all([driftCheck, listen, pooler, bloat, horizon, feedHorizon, slots], { concurrency: 2 })
  return [first, ...rest]
}).pipe(
  Effect.timeout("60 seconds"),
  Effect.orElseSucceed(() => [fail("doctor", "the checks did not finish within 60 s")])
)

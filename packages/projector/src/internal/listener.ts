/**
 * The projector's LISTEN connection: one dedicated `pg` client outside the pool that
 * re-connects when it drops (a restart, a terminated backend, a network cut). Every
 * (re)connection also fires one wake-up, since notifications sent while it was down are
 * lost. The pooled client of `@effect/sql-pg` swallows errors on its listen connection, so
 * a dropped connection would go unnoticed there.
 */
import type * as PgClient from "@effect/sql-pg/PgClient"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Redacted from "effect/Redacted"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import pg from "pg"

export const APPLICATION_NAME = "effect-durable-listener"

const connectOnce = (
  config: PgClient.PgClientConfig,
  channel: string,
  onNotify: (payload: string) => void
): Effect.Effect<void, Error> =>
  Effect.callback<void, Error>((resume) => {
    const client = new pg.Client({
      ...(config.url === undefined ? {} : { connectionString: Redacted.value(config.url) }),
      ...(config.host === undefined ? {} : { host: config.host }),
      ...(config.port === undefined ? {} : { port: config.port }),
      ...(config.database === undefined ? {} : { database: config.database }),
      ...(config.username === undefined ? {} : { user: config.username }),
      ...(config.password === undefined ? {} : { password: Redacted.value(config.password) }),
      application_name: APPLICATION_NAME,
      connectionTimeoutMillis: 10_000
    })
    let done = false
    const finish = (error: Error) => {
      if (done) return
      done = true
      client.removeAllListeners("notification")
      client.end().catch(() => undefined)
      resume(Effect.fail(error))
    }
    client.on("error", finish)
    client.on("end", () => finish(new Error("listen connection ended")))
    client.on("notification", (message) => {
      if (message.channel === channel) onNotify(message.payload ?? "")
    })
    client.connect()
      .then(() => client.query(`LISTEN ${client.escapeIdentifier(channel)}`))
      .then(() => onNotify(""))
      .catch((error: unknown) => finish(error instanceof Error ? error : new Error(String(error))))
    // Interrupted (the projector stops): close without reporting.
    return Effect.sync(() => {
      done = true
      client.removeAllListeners()
      client.on("error", () => undefined)
      client.end().catch(() => undefined)
    })
  })

/** Reconnects: 50 ms doubling, capped at 5 s; a connection that came up starts over. */
const reconnect = Schedule.exponential(Duration.millis(50)).pipe(Schedule.union(Schedule.spaced(Duration.seconds(5))))

/** Listens on `channel` until the scope closes, reconnecting with a capped backoff. */
export const listen = (
  config: PgClient.PgClientConfig,
  channel: string,
  onNotify: (payload: string) => void
): Effect.Effect<void, never, Scope.Scope> =>
  Effect.gen(function*() {
    const backoff = yield* Schedule.driver(reconnect)
    let connected = false
    while (true) {
      const lost = yield* Effect.flip(connectOnce(config, channel, (payload) => {
        connected = true
        onNotify(payload)
      }))
      if (connected) yield* backoff.reset
      connected = false
      yield* Effect.logDebug(`effect-durable projector: listen connection lost (${lost.message}); reconnecting`)
      yield* Effect.ignore(backoff.next(lost))
    }
  }).pipe(Effect.forkScoped, Effect.asVoid)

/**
 * A real NATS server with JetStream for tests, as a scoped resource: `NATS_URL` when set,
 * otherwise the `nats-server` binary (Debian package `nats-server`) started on 127.0.0.1 on
 * a free port with a temporary store directory, stopped and deleted on release (and by a
 * guardian if this process dies first).
 *
 * @since 0.1.0
 */
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { spawn, spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdirSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { freePort } from "./internal/embedded.js"
import { spawnGuardian } from "./internal/guardian.js"

export class NatsUnavailable extends Schema.TaggedError<NatsUnavailable>("@effect-durable/testing/NatsUnavailable")(
  "NatsUnavailable",
  { reason: Schema.String }
) {
  override get message() {
    return `NATS: ${this.reason}`
  }
}

export class NatsServer extends Context.Service<NatsServer, {
  readonly url: string
  readonly provider: "url" | "binary"
}>()("@effect-durable/testing/NatsServer") {}

export const INSTALL_HINT = "install it (Debian: apt-get install nats-server) or set NATS_URL"

const NatsConfig = Config.all({
  url: Config.option(Config.String("NATS_URL")),
  binary: Config.String("NATS_SERVER_BIN").pipe(Config.withDefault("nats-server")),
  required: Config.Boolean("EFFECT_DURABLE_REQUIRE_NATS").pipe(Config.withDefault(false))
})

const findBinary = (name: string): string | undefined => {
  for (const candidate of [name, "/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"]) {
    const probe = spawnSync(candidate, ["--version"], { encoding: "utf8" })
    if (probe.status === 0) return candidate
  }
  return undefined
}

/**
 * Whether a NATS suite can run here, decided when the suite is collected. `required` is
 * `EFFECT_DURABLE_REQUIRE_NATS`: CI sets it, so there a missing server fails the run.
 */
export const availability = (): {
  readonly available: boolean
  readonly required: boolean
  readonly reason: string
} => {
  const config = Effect.runSync(Effect.orDie(NatsConfig))
  if (Option.isSome(config.url)) return { available: true, required: config.required, reason: "NATS_URL" }
  return findBinary(config.binary) === undefined
    ? { available: false, required: config.required, reason: `no nats-server binary: ${INSTALL_HINT}` }
    : { available: true, required: config.required, reason: "nats-server binary" }
}

const startBinary = (binary: string) =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: async () => {
        const port = await freePort()
        const store = join(tmpdir(), `effect-durable-nats-${process.pid}-${randomBytes(4).toString("hex")}`)
        mkdirSync(store, { recursive: true })
        const child = spawn(binary, ["-js", "-a", "127.0.0.1", "-p", String(port), "-sd", store], {
          stdio: ["ignore", "ignore", "pipe"]
        })
        const guardian = spawnGuardian(store, child.pid!)
        let log = ""
        await new Promise<void>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`nats-server did not start in 20 s: ${log}`)), 20_000)
          child.stderr!.on("data", (chunk) => {
            log += chunk
            if (log.includes("Server is ready")) {
              clearTimeout(timer)
              resolve()
            }
          })
          child.once("exit", (code) => reject(new Error(`nats-server exited (${code}): ${log}`)))
        })
        return { url: `nats://127.0.0.1:${port}`, child, store, guardian }
      },
      catch: (error) => new NatsUnavailable({ reason: error instanceof Error ? error.message : String(error) })
    }),
    ({ child, guardian, store }) =>
      Effect.promise(async () => {
        if (child.exitCode === null) {
          const exited = new Promise((resolve) => child.once("exit", resolve))
          child.kill("SIGTERM")
          await exited
        }
        rmSync(store, { recursive: true, force: true })
        guardian.kill("SIGTERM")
      })
  )

export const layer: Layer.Layer<NatsServer, NatsUnavailable> = Layer.effect(
  NatsServer,
  Effect.gen(function*() {
    const config = yield* Effect.mapError(NatsConfig, (error) => new NatsUnavailable({ reason: String(error) }))
    if (Option.isSome(config.url)) return NatsServer.of({ url: config.url.value, provider: "url" })
    const binary = findBinary(config.binary)
    if (binary === undefined) return yield* new NatsUnavailable({ reason: `no nats-server binary: ${INSTALL_HINT}` })
    const started = yield* startBinary(binary)
    return NatsServer.of({ url: started.url, provider: "binary" })
  })
)

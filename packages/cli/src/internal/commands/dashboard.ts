/**
 * `effect-durable dashboard [--port 8080] [--host 127.0.0.1]`: serves the admin page. Without
 * credentials (`DURABLE_DASHBOARD_USER` + `DURABLE_DASHBOARD_PASSWORD`, or
 * `DURABLE_DASHBOARD_TOKEN`, a password or token of at least 16 characters: an empty or short
 * one stops it) it listens on loopback only and answers to loopback Host names (and the
 * address it listens on) only; `--read-only` (or `DURABLE_DASHBOARD_READ_ONLY=true`) refuses
 * every write.
 */
import * as Input from "@effect-durable/core/Input"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import * as HttpServer from "effect/http/HttpServer"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { createServer } from "node:http"
import * as AdminPage from "../../AdminPage.js"
import { duration, toggle, within } from "../arguments.js"
import { configProvider, withDatabase } from "../connection.js"
import { CommandError, ExitCode, usage } from "../errors.js"
import * as Output from "../output.js"

const isLoopback = (host: string) => host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host)

/** The Host header's name for a listening address: `::1` is written `[::1]`. */
const hostNameOf = (host: string) => (host.includes(":") ? `[${host.toLowerCase()}]` : host.toLowerCase())

/** `http://127.0.0.1:8080/`: where a browser opens the page. */
const urlOf = (address: HttpServer.HttpServer["Service"]["address"]): string => {
  const formatted = HttpServer.formatAddress(address)
  return formatted.endsWith("/") ? formatted : `${formatted}/`
}

export const dashboard = Command.make(
  "dashboard",
  {
    port: Flag.Int("port").pipe(
      Flag.withMetavar("PORT"),
      Flag.withDefault(8080),
      Flag.withDescription("Port to listen on (default 8080; 0: any free port)")
    ),
    host: Flag.String("host").pipe(
      Flag.withMetavar("HOST"),
      Flag.withDefault("127.0.0.1"),
      Flag.withDescription("Address to listen on (default 127.0.0.1); beyond loopback only with credentials")
    ),
    readOnly: toggle("read-only", "Refuse every action (403)"),
    showPayloads: toggle("show-payloads", "Show message payloads and stored ledger responses"),
    statementTimeout: duration("statement-timeout").pipe(
      Flag.withDefault("5 seconds"),
      Flag.withDescription("Longest run of a page query (at most 10m; default 5s)"),
      within("statement-timeout", AdminPage.AdminPageOptionsTable.declarations.statementTimeout.schema)
    )
  },
  Effect.fn("effect-durable.dashboard")(function*(args) {
    if (!Number.isInteger(args.port) || args.port < 0 || args.port > 65535) {
      return yield* usage(`--port expects 0 to 65535, got ${args.port}`)
    }
    // Empty strings kept: `DURABLE_DASHBOARD_TOKEN=` is a mistake to report, not "no credentials".
    const provider = yield* configProvider({ keepEmpty: true })
    const security = yield* AdminPage.config.pipe(
      Effect.provideService(ConfigProvider.ConfigProvider, provider),
      Effect.mapError((error) => usage(Input.configError(error).message))
    )
    if (security.auth?.basic !== undefined) Output.registerSecret(Redacted.value(security.auth.basic.password))
    if (security.auth?.bearer !== undefined) Output.registerSecret(Redacted.value(security.auth.bearer))
    if (!isLoopback(args.host) && security.auth === undefined) {
      return yield* usage(
        `refusing to listen on ${args.host} without credentials: set DURABLE_DASHBOARD_USER and DURABLE_DASHBOARD_PASSWORD ` +
          "(or DURABLE_DASHBOARD_TOKEN), or listen on 127.0.0.1"
      )
    }
    const readOnly = args.readOnly || security.readOnly
    // Without credentials, the loopback names and the address it listens on (127.255.255.254).
    const allowedHosts = [...new Set([...AdminPage.LOOPBACK_HOSTS, hostNameOf(args.host)])]
    const page = AdminPage.layer({
      ...(security.auth === undefined ? { allowedHosts } : { auth: security.auth }),
      readOnly,
      showPayloads: args.showPayloads,
      statementTimeout: args.statementTimeout
    })
    const server = HttpRouter.serve(page, { disableLogger: true, disableListenLog: true }).pipe(
      Layer.provideMerge(NodeHttpServer.layer(() => createServer(), { port: args.port, host: args.host }))
    )
    const serve = Effect.gen(function*() {
      const { address } = yield* HttpServer.HttpServer
      yield* Output.note(
        `effect-durable dashboard: ${urlOf(address)} (${
          security.auth === undefined ? "no credentials: loopback only" : "credentials required"
        }${readOnly ? ", read-only" : ""}); Ctrl-C stops it`
      )
      return yield* Effect.never
    }).pipe(
      Effect.provide(server),
      Effect.catchTag("ServeError", (error) =>
        Effect.fail(
          new CommandError({
            exitCode: ExitCode.usage,
            message: `cannot listen on ${args.host}:${args.port}: ${String(error.cause ?? error)}`
          })
        ))
    )
    return yield* withDatabase({ anyVersion: true, poolSize: 5 })(serve)
  })
).pipe(Command.withDescription("Serve the admin page (loopback only unless credentials are set)"))

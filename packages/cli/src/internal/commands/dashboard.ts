/**
 * `effect-durable dashboard [--port 8080] [--host 127.0.0.1]`: serves the admin page. Without
 * credentials (`DURABLE_DASHBOARD_USER` + `DURABLE_DASHBOARD_PASSWORD`, or
 * `DURABLE_DASHBOARD_TOKEN`) it listens on loopback only and answers to loopback Host names
 * only; `--read-only` (or `DURABLE_DASHBOARD_READ_ONLY=true`) refuses every write.
 */
import { Command, Options } from "@effect/cli"
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import * as HttpServer from "effect/http/HttpServer"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { createServer } from "node:http"
import * as AdminPage from "../../AdminPage.js"
import { duration } from "../arguments.js"
import { configProvider, withDatabase } from "../connection.js"
import { CliError, ExitCode, usage } from "../errors.js"
import * as Output from "../output.js"

const isLoopback = (host: string) => host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host)

export const dashboard = Command.make(
  "dashboard",
  {
    port: Options.integer("port").pipe(Options.withDefault(8080), Options.withDescription("Port to listen on (0: any free port)")),
    host: Options.text("host").pipe(
      Options.withDefault("127.0.0.1"),
      Options.withDescription("Address to listen on; beyond loopback only with credentials")
    ),
    readOnly: Options.boolean("read-only").pipe(Options.withDescription("Refuse every action (403)")),
    showPayloads: Options.boolean("show-payloads").pipe(Options.withDescription("Show message payloads and stored ledger responses")),
    statementTimeout: duration("statement-timeout").pipe(
      Options.withDefault("5 seconds"),
      Options.withDescription("Longest run of a page query")
    )
  },
  (args) =>
    Effect.gen(function*() {
      if (!Number.isInteger(args.port) || args.port < 0 || args.port > 65535) {
        return yield* usage(`--port expects 0 to 65535, got ${args.port}`)
      }
      const provider = yield* configProvider
      const security = yield* Effect.provideService(AdminPage.config, ConfigProvider.ConfigProvider, provider).pipe(
        Effect.mapError((error) => usage(`dashboard credentials: ${error.message}`))
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
      const serve = Effect.gen(function*() {
        const router = yield* AdminPage.make({
          ...(security.auth === undefined ? { allowedHosts: AdminPage.LOOPBACK_HOSTS } : { auth: security.auth }),
          readOnly,
          showPayloads: args.showPayloads,
          statementTimeout: args.statementTimeout
        })
        yield* HttpServer.serveEffect(router)
        const server = yield* HttpServer.HttpServer
        const address = server.address._tag === "TcpAddress"
          ? `http://${server.address.hostname.includes(":") ? `[${server.address.hostname}]` : server.address.hostname}:${server.address.port}/`
          : HttpServer.formatAddress(server.address)
        yield* Output.note(
          `effect-durable dashboard: ${address} (${security.auth === undefined ? "no credentials: loopback only" : "credentials required"}${
            readOnly ? ", read-only" : ""
          }); Ctrl-C stops it`
        )
        return yield* Effect.never
      }).pipe(
        Effect.scoped,
        Effect.provide(NodeHttpServer.layer(() => createServer(), { port: args.port, host: args.host }).pipe(
          Layer.mapError((error) =>
            new CliError({ exitCode: ExitCode.usage, message: `cannot listen on ${args.host}:${args.port}: ${String((error as { cause?: unknown }).cause ?? error)}` })
          )
        ))
      )
      return yield* withDatabase({ anyVersion: true, poolSize: 5 })(serve)
    })
).pipe(Command.withDescription("Serve the admin page (loopback only unless credentials are set)"))

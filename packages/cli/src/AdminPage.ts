/**
 * The admin page of effect-durable, for an application's own `HttpRouter` (Effect 4's
 * layer-based router), under a prefix of its server (the same page `effect-durable dashboard`
 * serves): per-topic counts with a
 * chart of the last minutes, messages filtered by id, topic, ordering key, state, attempts and
 * values inside payload or headers (the filter lives in the URL), a message in full, dead
 * letters grouped by topic and error, redrive and discard of one message, a selection or
 * everything matching (server-side, in committed batches, with progress), pause and resume of
 * a topic, inbox consumers and their receipts, a ledger lookup, the schema's version and
 * drift, health endpoints, and `/metrics` (OpenMetrics, or Prometheus's text format).
 *
 * Security: without `auth` the page trusts whoever reaches it (mount it behind your app's
 * authentication, and say who the operator is with `operator`); with `auth` it asks for basic
 * credentials or a bearer token (of at least 16 characters). `readOnly` refuses every write
 * and every check that runs statements beyond reads (403). Writes are same-origin JSON POSTs
 * only (CSRF); another site's page cannot make it read either (only navigations pass). It
 * answers only at its own paths, exactly as mounted (case, slashes). Payloads and stored
 * responses are hidden unless `showPayloads`, and so is the payload filter. Every page query
 * runs under `statementTimeout`. The page loads nothing from elsewhere.
 *
 * @since 0.1.0
 */
import type { DurableConfigError } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import { declare, option } from "@effect-durable/core/Options"
import { DurableSettings } from "@effect-durable/pg/DurableConfig"
import * as Feed from "@effect-durable/pg/Feed"
import * as FlowControl from "@effect-durable/pg/FlowControl"
import * as InboxAdmin from "@effect-durable/pg/InboxAdmin"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import * as OutboxBulk from "@effect-durable/pg/OutboxBulk"
import * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import * as OutboxStatements from "@effect-durable/pg/OutboxStatements"
import * as Schedules from "@effect-durable/pg/Schedules"
import * as WorkflowAdmin from "@effect-durable/workflow/WorkflowAdmin"
import * as WorkflowDeploys from "@effect-durable/workflow/WorkflowDeploys"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Config from "effect/Config"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as HttpRouter from "effect/http/HttpRouter"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import type * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import * as SchemaIssue from "effect/SchemaIssue"
import type * as Scope from "effect/Scope"
import * as SqlClient from "effect/sql/SqlClient"
import type * as Route from "./internal/page/route.js"
import * as Routes from "./internal/page/routes.js"
import {
  type Auth,
  AuthSchema,
  authText,
  isPassword,
  isToken,
  isUser,
  PASSWORD_RULE,
  TOKEN_RULE,
  USER_RULE
} from "./internal/page/security.js"

export { LOOPBACK_HOSTS } from "./internal/page/security.js"
export type { Auth } from "./internal/page/security.js"

export interface Options {
  /**
   * Credentials the page asks for (basic and/or bearer; a password or token of at least 16
   * characters). Default: none, for a page behind your app's own auth.
   */
  readonly auth?: Auth
  /** Refuse every write (403): a page for people who may look but not act. Default false. */
  readonly readOnly?: boolean
  /** Show message payloads and stored ledger responses. Default false. */
  readonly showPayloads?: boolean
  /** Longest run of any query of the page (and of each batch of a bulk action). Default 5 s. */
  readonly statementTimeout?: Duration.Input
  /** Rows per batch of a bulk action (1-10,000). Default 500. */
  readonly batchSize?: number
  /** Host names the page answers to (any port); default any. Set it for a page without credentials (DNS rebinding). */
  readonly allowedHosts?: ReadonlyArray<string>
  /** Who the operator is, from your app's authentication; logged with every action. */
  readonly operator?: (request: HttpServerRequest.HttpServerRequest) => Effect.Effect<string | undefined>
  /** The page's path prefix as the browser sees it, when a proxy strips it (`/admin/durable`); default: found from the mount. */
  readonly basePath?: string
}

/** The services the page runs on: what `Durable.layer` (or `layerOver`) provides. */
export type Requirements = Exclude<Route.Requirements, OutboxSearch.OutboxSearch | OutboxBulk.OutboxBulk>

/**
 * A path prefix the page's links start with: segments of URL path characters, none empty
 * and none `.` or `..`. So never `//host` (a link to another site) nor a trailing slash.
 */
const BASE_PATH = /^(?:\/(?!\.{1,2}(?:\/|$))[A-Za-z0-9\-._~!$&'()*+,;=:@%]+)+$/

/** The page's options, each declared once (`operator` and `allowedHosts` are taken as given). */
export const AdminPageOptionsTable = declare({
  statementTimeout: option({
    schema: Input.DurationIn({ max: "10 minutes" }),
    default: "5 seconds",
    purpose: "longest run of any query of the page and of each batch of a bulk action",
    example: "5 seconds"
  }),
  batchSize: option({
    schema: Input.Count(10_000),
    default: 500,
    purpose: "rows per batch of a bulk action (1-10,000)",
    example: "500"
  }),
  readOnly: option({
    schema: Schema.Boolean,
    default: false,
    variable: "DURABLE_DASHBOARD_READ_ONLY",
    text: "boolean",
    purpose: "refuse every write (403)",
    example: "true"
  }),
  showPayloads: option({
    schema: Schema.Boolean,
    default: false,
    purpose: "show message payloads and stored ledger responses",
    example: "true"
  }),
  basePath: option({
    schema: Schema.String.check(Schema.makeFilter((p) => p === "" || BASE_PATH.test(p), {
      message:
        "a path prefix such as /admin/durable (segments of URL path characters, none empty, no trailing slash), or empty"
    })),
    optional: true,
    purpose: "the page's path prefix as the browser sees it, when a proxy strips it",
    example: "/admin/durable"
  }),
  auth: option({
    schema: AuthSchema,
    optional: true,
    purpose: "credentials the page asks for",
    example: "{ bearer: Redacted.make(token) }"
  })
})

/** Every default of the page, from its declarations. */
export const Defaults = AdminPageOptionsTable.defaults

/**
 * The page's routes, unprefixed: add them to your `HttpRouter` under a prefix of your own,
 * `HttpRouter.addAll(AdminPage.make(options), { prefix: "/admin/durable" })` (what `layer`
 * does), and the page's links follow that prefix. Bulk actions run in the scope given here
 * (closing it, the router's layer going down, interrupts them between or during a batch:
 * whole batches are done, the rest untouched).
 */
export const make = Effect.fn("AdminPage.make")(function*(
  options: Options = {}
): Effect.fn.Return<ReadonlyArray<HttpRouter.Route>, DurableConfigError, Requirements | Scope.Scope> {
  const { allowedHosts: _allowedHosts, auth, mount: _mount, operator: _operator, ...checked } = options as LayerOptions
  const decoded = yield* AdminPageOptionsTable.decode({
    ...checked,
    ...(auth === undefined ? {} : { auth: authText(auth) })
  })
  const search = yield* OutboxSearch.make
  // Exactly the services the page runs on, so a request keeps its own span, logger and scope.
  let context = Context.make(SqlClient.SqlClient, yield* SqlClient.SqlClient).pipe(
    Context.add(Outbox.Outbox, yield* Outbox.Outbox),
    Context.add(OutboxStatements.OutboxStatements, yield* OutboxStatements.OutboxStatements),
    Context.add(Schedules.Schedules, yield* Schedules.Schedules),
    // Built here from the SQL client and settings: mounting the page asks for no more services.
    Context.add(FlowControl.FlowControl, yield* FlowControl.make),
    Context.add(Feed.Feed, yield* Feed.make),
    Context.add(DurableSettings, yield* DurableSettings),
    Context.add(OutboxAdmin.OutboxAdmin, yield* OutboxAdmin.OutboxAdmin),
    Context.add(InboxAdmin.InboxAdmin, yield* InboxAdmin.InboxAdmin),
    Context.add(MutationLedger.MutationLedger, yield* MutationLedger.MutationLedger),
    Context.add(OutboxSearch.OutboxSearch, search),
    Context.add(OutboxBulk.OutboxBulk, yield* OutboxBulk.make)
  )
  // The schema view's LISTEN/NOTIFY check needs the PostgreSQL client itself, when there is one.
  const pg = yield* Effect.serviceOption(PgClient.PgClient)
  if (Option.isSome(pg)) context = Context.add(context, PgClient.PgClient, pg.value)
  return yield* Routes.make(
    {
      policy: {
        auth: options.auth,
        readOnly: decoded.readOnly,
        allowedHosts: options.allowedHosts,
        operator: options.operator
      },
      showPayloads: decoded.showPayloads,
      statementTimeout: decoded.statementTimeout,
      basePath: decoded.basePath,
      batchSize: decoded.batchSize
    },
    context,
    yield* WorkflowAdmin.make,
    yield* WorkflowDeploys.make
  )
})

export interface LayerOptions extends Options {
  /** Where the page lives on your router, such as `/admin/durable`. Default: the router's root. */
  readonly mount?: HttpRouter.PathInput
}

/**
 * The page on your server's `HttpRouter`, under `mount`: a layer next to your own routes, for
 * `HttpRouter.serve`. Provide a route middleware to it (`Layer.provide(Staff.layer)`) to put the
 * page behind your authentication. Its bulk actions run until the layer is released.
 */
export const layer = (
  options: LayerOptions = {}
): Layer.Layer<never, DurableConfigError, HttpRouter.HttpRouter | Requirements> =>
  HttpRouter.addAll(make(options), { prefix: options.mount === "/" ? undefined : options.mount })

const invalid = (variable: string, message: string) =>
  new Config.ConfigError(
    new Schema.SchemaError(new SchemaIssue.Pointer([variable], new SchemaIssue.InvalidValue({ message })))
  )

/**
 * The page's security settings from the environment, as `effect-durable dashboard` reads
 * them: `DURABLE_DASHBOARD_USER` and `DURABLE_DASHBOARD_PASSWORD` (basic),
 * `DURABLE_DASHBOARD_TOKEN` (bearer), `DURABLE_DASHBOARD_READ_ONLY`. A password or token that
 * is set but empty, blank or shorter than 16 characters is an error naming the variable,
 * never a credential (read them with a provider that keeps empty strings to see `TOKEN=`).
 */
export const config: Config.Config<{ readonly auth: Auth | undefined; readonly readOnly: boolean }> = Config.all({
  user: Config.option(Config.String("DURABLE_DASHBOARD_USER")),
  password: Config.option(Config.Redacted("DURABLE_DASHBOARD_PASSWORD")),
  token: Config.option(Config.Redacted("DURABLE_DASHBOARD_TOKEN")),
  readOnly: Config.Boolean(AdminPageOptionsTable.declarations.readOnly.variable).pipe(
    Config.withDefault(AdminPageOptionsTable.defaults.readOnly)
  )
}).pipe(
  Config.mapEffect(({ password, readOnly, token, user }) => {
    if (Option.isSome(user) !== Option.isSome(password)) {
      return Effect.fail(
        invalid(
          "DURABLE_DASHBOARD_PASSWORD",
          "set both DURABLE_DASHBOARD_USER and DURABLE_DASHBOARD_PASSWORD, or neither"
        )
      )
    }
    if (Option.isSome(user) && !isUser(user.value)) return Effect.fail(invalid("DURABLE_DASHBOARD_USER", USER_RULE))
    if (Option.isSome(password) && !isPassword(Redacted.value(password.value))) {
      return Effect.fail(invalid("DURABLE_DASHBOARD_PASSWORD", PASSWORD_RULE))
    }
    if (Option.isSome(token) && !isToken(Redacted.value(token.value))) {
      return Effect.fail(invalid("DURABLE_DASHBOARD_TOKEN", TOKEN_RULE))
    }
    const basic = Option.isSome(user) && Option.isSome(password)
      ? { user: user.value, password: password.value }
      : undefined
    const bearer: Redacted.Redacted<string> | undefined = Option.getOrUndefined(token)
    const auth: Auth | undefined = basic === undefined && bearer === undefined
      ? undefined
      : { ...(basic === undefined ? {} : { basic }), ...(bearer === undefined ? {} : { bearer }) }
    return Effect.succeed({ auth, readOnly })
  })
)

/**
 * The whole substrate from one configuration: a `PgClient` (and `SqlClient`) built from the
 * connection settings, the validated `DurableSettings`, and every service over it: the
 * `MutationLedger`, the outbox (`Outbox`, `OutboxWorker`, `OutboxAdmin`), the inbox (`Inbox`,
 * `InboxWorker`, `InboxAdmin`), `Cas`, and `Keyset` when given cursor keys. Every option is
 * decoded before a connection is opened. Users who bring their own `SqlClient` use `layerOver`.
 *
 * A layer here provides only services that work, and its type says which: `Keyset` comes with
 * the substrate exactly when the layer is given the keys that sign its cursors (`cursorKeys`,
 * or `layerConfig({ cursorKeys: Cursor.keyringConfig })`). Without them it provides no `Keyset`
 * at all, so it can never shadow the `Keyset.layer` an application composes itself, and a
 * program that pages without providing one fails to compile instead of at its first page.
 *
 * @since 0.1.0
 */
import * as Cursor from "@effect-durable/core/Cursor"
import { type DatabaseError, DurableConfigError, SchemaVersionMismatch } from "@effect-durable/core/Errors"
import * as Input from "@effect-durable/core/Input"
import * as PgClient from "@effect/sql-pg/PgClient"
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type * as SqlClient from "effect/sql/SqlClient"
import * as Cas from "./Cas.js"
import {
  type ConnectionInput,
  ConnectionOptions,
  DurableSettings,
  makeConnection,
  makeSettings,
  type SettingsInput,
  SettingsOptions,
  Variables as ConnectionVariables
} from "./DurableConfig.js"
import { classify } from "./ErrorClassification.js"
import * as Feed from "./Feed.js"
import * as FlowControl from "./FlowControl.js"
import * as Inbox from "./Inbox.js"
import * as InboxAdmin from "./InboxAdmin.js"
import * as InboxWorker from "./InboxWorker.js"
import { mapError } from "./internal/layer.js"
import * as Keyset from "./Keyset.js"
import * as Migrations from "./Migrations.js"
import * as MutationLedger from "./MutationLedger.js"
import * as Outbox from "./Outbox.js"
import * as OutboxAdmin from "./OutboxAdmin.js"
import * as OutboxBulk from "./OutboxBulk.js"
import * as OutboxSearch from "./OutboxSearch.js"
import * as OutboxStatements from "./OutboxStatements.js"
import * as OutboxWorker from "./OutboxWorker.js"
import * as Schedules from "./Schedules.js"

export interface Options {
  readonly connection: ConnectionInput
  readonly settings?: SettingsInput
  readonly outbox?: Outbox.OutboxOptions
  readonly inbox?: Inbox.InboxOptions
  /** Keys that sign `Keyset` cursors, newest first: with them the layer provides `Keyset`, without them it provides none. */
  readonly cursorKeys?: Cursor.Keyring
  /** Run `Migrations.migrate()` when the layer is built (needs the owner role). Default false. */
  readonly migrate?: boolean
  /**
   * Check at build that the database's schema is the version this code needs, and fail
   * with `SchemaVersionMismatch` otherwise (older: run the migrations; newer: a rolled-back
   * deploy). Default true.
   */
  readonly checkSchemaVersion?: boolean
}

/** What every layer of this module provides; given cursor keys, it provides `Keyset.Keyset` too. */
export type Services =
  | PgClient.PgClient
  | SqlClient.SqlClient
  | DurableSettings
  | MutationLedger.MutationLedger
  | Outbox.Outbox
  | OutboxStatements.OutboxStatements
  | OutboxWorker.OutboxWorker
  | OutboxAdmin.OutboxAdmin
  | Inbox.Inbox
  | InboxWorker.InboxWorker
  | InboxAdmin.InboxAdmin
  | Cas.Cas
  | OutboxSearch.OutboxSearch
  | OutboxBulk.OutboxBulk
  | Schedules.Schedules
  | FlowControl.FlowControl
  | Feed.Feed

/** Decodes every option; the first one broken is a `DurableConfigError` naming it. */
const decode = (options: Omit<Options, "connection">) =>
  Effect.gen(function*() {
    const settings = yield* makeSettings(options.settings)
    yield* Outbox.decodeOptions(options.outbox ?? {})
    yield* Inbox.decodeOptions(options.inbox ?? {})
    const codec = options.cursorKeys === undefined ? undefined : yield* Cursor.make(options.cursorKeys)
    return { settings, codec }
  })

type Substrate = Exclude<Services, PgClient.PgClient | SqlClient.SqlClient>
type BuildError = DurableConfigError | DatabaseError | SchemaVersionMismatch

/** The options of `layerOver`: `Options` without the connection. */
export type OverOptions = Omit<Options, "connection">
/**
 * Options that carry cursor keys: the layer provides `Keyset` too. A plain `Options` value,
 * whose keys the type does not settle, takes the third signature: the layer's type promises no
 * `Keyset` (it builds one when the value holds keys, so compose your own `Keyset.layer` only
 * beside a substrate given none).
 */
export type WithKeys<O> = O & { readonly cursorKeys: Cursor.Keyring }
/** Options without cursor keys: the layer provides no `Keyset`. */
export type WithoutKeys<O> = O & { readonly cursorKeys?: undefined }

// The body of both of layerOver's signatures: Keyset is in the layer exactly when keys were
// given, as the signatures say (the keyless branch is widened here, never where a caller sees it).
const over = (options: OverOptions): Layer.Layer<Substrate | Keyset.Keyset, BuildError, SqlClient.SqlClient> =>
  Layer.unwrap(
    Effect.map(decode(options), ({ codec, settings }) => {
      const settingsLayer = Layer.succeed(DurableSettings, settings)
      // Migrate when asked, then check the version: the app never serves on a schema it does not know.
      const migrated = Layer.effectDiscard(Effect.gen(function*() {
        if (options.migrate === true) yield* Migrations.migrate()
        if (options.checkSchemaVersion !== false) yield* Migrations.checkSchemaVersion
      })).pipe(Layer.provide(settingsLayer))
      // Layer.fresh: two substrates built in one memo map (two schemas, two databases) stay apart.
      const services = Layer.mergeAll(
        Layer.fresh(MutationLedger.layer),
        Layer.fresh(OutboxWorker.layer),
        Layer.fresh(OutboxAdmin.layer),
        Inbox.layer(options.inbox),
        Layer.fresh(InboxWorker.layer),
        Layer.fresh(InboxAdmin.layer),
        Layer.fresh(Cas.layer),
        Layer.fresh(OutboxSearch.layer),
        Layer.fresh(OutboxBulk.layer),
        // Schedules enqueue through this substrate's outbox.
        Layer.fresh(Schedules.layer),
        Layer.fresh(FlowControl.layer),
        Layer.fresh(Feed.layer),
        OutboxStatements.layer(options.outbox)
      ).pipe(Layer.provideMerge(Outbox.layer(options.outbox)))
      const withKeyset = codec === undefined
        ? services as Layer.Layer<Substrate | Keyset.Keyset, BuildError, SqlClient.SqlClient>
        : Layer.merge(
          services,
          Layer.fresh(Keyset.layer.pipe(Layer.provide(Layer.succeed(Cursor.CursorCodec, codec))))
        )
      return withKeyset.pipe(Layer.provideMerge(Layer.merge(settingsLayer, migrated)))
    })
  )

/**
 * The substrate over a `SqlClient` you already have (your pool, your transactions); with
 * `cursorKeys`, `Keyset` too.
 */
export const layerOver: {
  (options: WithKeys<OverOptions>): Layer.Layer<Substrate | Keyset.Keyset, BuildError, SqlClient.SqlClient>
  (options?: WithoutKeys<OverOptions>): Layer.Layer<Substrate, BuildError, SqlClient.SqlClient>
  (options: OverOptions): Layer.Layer<Substrate, BuildError, SqlClient.SqlClient>
} = (options: OverOptions = {}) => over(options)

const overClient = (options: Options): Layer.Layer<Services | Keyset.Keyset, BuildError> =>
  Layer.unwrap(
    Effect.gen(function*() {
      const connection = yield* makeConnection(options.connection)
      // Everything else is decoded before a connection is opened.
      yield* decode(options)
      const client = PgClient.layer({
        url: connection.url,
        maxConnections: connection.poolSize,
        connectTimeout: connection.connectTimeout,
        idleTimeout: connection.idleTimeout,
        applicationName: connection.applicationName,
        prepare: connection.preparedStatements
      }).pipe(mapError(classify("Durable.layer")))
      const { connection: _, ...rest } = options
      return over(rest).pipe(Layer.provideMerge(client))
    })
  )

/** A `PgClient` built from the connection settings, and the whole substrate over it; with `cursorKeys`, `Keyset` too. */
export const layer: {
  (options: WithKeys<Options>): Layer.Layer<Services | Keyset.Keyset, BuildError>
  (options: WithoutKeys<Options>): Layer.Layer<Services, BuildError>
  (options: Options): Layer.Layer<Services, BuildError>
} = overClient

/** Every variable `layerConfig` reads: what each is for and a value that works. */
export const Variables: Readonly<Record<string, Input.VariableHint>> = {
  ...ConnectionVariables,
  ...Outbox.OutboxOptionsTable.variables,
  ...Inbox.InboxOptionsTable.variables
}

/** What `layerConfig` takes besides the environment. */
export interface ConfigOptions {
  readonly migrate?: boolean
  readonly checkSchemaVersion?: boolean
  /**
   * Where the keys that sign `Keyset` cursors are read (`Cursor.keyringConfig`: `CURSOR_KEYS`):
   * with it the layer provides `Keyset` and the keys are required, without it neither.
   */
  readonly cursorKeys?: Config.Config<Cursor.Keyring>
}

/**
 * `layer` from configuration (see `Variables`): the connection, the settings, the outbox's
 * and the inbox's options, and, given `cursorKeys` (`Cursor.keyringConfig`), the keys that
 * sign keyset cursors. Every variable is read and checked before a connection is opened; a
 * bad one is a `DurableConfigError` naming the variable, what it is for and an example value.
 */
export const layerConfig: {
  (options: ConfigOptions & { readonly cursorKeys: Config.Config<Cursor.Keyring> }): Layer.Layer<
    Services | Keyset.Keyset,
    BuildError
  >
  (options?: ConfigOptions & { readonly cursorKeys?: undefined }): Layer.Layer<Services, BuildError>
  (options: ConfigOptions): Layer.Layer<Services, BuildError>
} = (options: ConfigOptions = {}) =>
  Layer.unwrap(
    Effect.gen(function*() {
      const connection = yield* ConnectionOptions.fromConfig()
      const settings = yield* SettingsOptions.fromConfig()
      const outbox = yield* Outbox.OutboxOptionsTable.fromConfig()
      const inbox = yield* Inbox.InboxOptionsTable.fromConfig()
      const { cursorKeys, ...flags } = options
      const keys = cursorKeys === undefined
        ? undefined
        : yield* Effect.mapError(cursorKeys, (error) => Input.configError(error, Variables))
      const full: Options = {
        connection,
        settings,
        outbox,
        inbox,
        ...flags,
        ...(keys === undefined ? {} : { cursorKeys: keys })
      }
      // The keyring's own rules (lengths, duplicate ids), named by its variable.
      yield* Effect.mapError(
        decode(full),
        (error) =>
          error.field.startsWith("cursor.")
            ? Input.fromVariable(new DurableConfigError({ field: "cursor", rule: `${error.field}: ${error.rule}` }), {
              cursor: "CURSOR_KEYS"
            }, Variables)
            : error
      )
      return overClient(full)
    })
  )

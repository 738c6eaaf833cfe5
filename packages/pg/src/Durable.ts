/**
 * The whole substrate from one configuration: a `PgClient` (and `SqlClient`) built from the
 * connection settings, the validated `DurableSettings`, and every service over it: the
 * `MutationLedger`, the outbox (`Outbox`, `OutboxWorker`, `OutboxAdmin`), the inbox (`Inbox`,
 * `InboxWorker`, `InboxAdmin`), `Cas` and `Keyset`. Every option is decoded before a
 * connection is opened. Users who bring their own `SqlClient` use `layerOver`.
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
import * as Option from "effect/Option"
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
import * as OutboxWorker from "./OutboxWorker.js"

export interface Options {
  readonly connection: ConnectionInput
  readonly settings?: SettingsInput
  readonly outbox?: Outbox.OutboxOptions
  readonly inbox?: Inbox.InboxOptions
  /** Keys that sign `Keyset` cursors, newest first; without them `Keyset.page` fails saying so. */
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

export type Services =
  | PgClient.PgClient
  | SqlClient.SqlClient
  | DurableSettings
  | MutationLedger.MutationLedger
  | Outbox.Outbox
  | OutboxWorker.OutboxWorker
  | OutboxAdmin.OutboxAdmin
  | Inbox.Inbox
  | InboxWorker.InboxWorker
  | InboxAdmin.InboxAdmin
  | Cas.Cas
  | Keyset.Keyset
  | OutboxSearch.OutboxSearch
  | OutboxBulk.OutboxBulk

/** Decodes every option; the first one broken is a `DurableConfigError` naming it. */
const decode = (options: Omit<Options, "connection">) =>
  Effect.gen(function*() {
    const settings = yield* makeSettings(options.settings)
    yield* Outbox.decodeOptions(options.outbox ?? {})
    yield* Inbox.decodeOptions(options.inbox ?? {})
    const codec = options.cursorKeys === undefined ? undefined : yield* Cursor.make(options.cursorKeys)
    return { settings, codec }
  })

/** The substrate over a `SqlClient` you already have (your pool, your transactions). */
export const layerOver = (
  options: Omit<Options, "connection"> = {}
): Layer.Layer<
  Exclude<Services, PgClient.PgClient | SqlClient.SqlClient>,
  DurableConfigError | DatabaseError | SchemaVersionMismatch,
  SqlClient.SqlClient
> =>
  Layer.unwrap(
    Effect.map(decode(options), ({ codec, settings }) => {
      const settingsLayer = Layer.succeed(DurableSettings, settings)
      // Migrate when asked, then check the version: the app never serves on a schema it does not know.
      const migrated = Layer.effectDiscard(Effect.gen(function*() {
        if (options.migrate === true) yield* Migrations.migrate()
        if (options.checkSchemaVersion !== false) yield* Migrations.checkSchemaVersion
      })).pipe(Layer.provide(settingsLayer))
      const keyset = codec === undefined
        ? Keyset.layerWithoutKeys
        : Keyset.layer.pipe(Layer.provide(Layer.succeed(Cursor.CursorCodec, codec)))
      // Layer.fresh: two substrates built in one memo map (two schemas, two databases) stay apart.
      return Layer.mergeAll(
        Layer.fresh(MutationLedger.layer),
        Outbox.layer(options.outbox),
        Layer.fresh(OutboxWorker.layer),
        Layer.fresh(OutboxAdmin.layer),
        Inbox.layer(options.inbox),
        Layer.fresh(InboxWorker.layer),
        Layer.fresh(InboxAdmin.layer),
        Layer.fresh(Cas.layer),
        Layer.fresh(OutboxSearch.layer),
        Layer.fresh(OutboxBulk.layer),
        Layer.fresh(keyset)
      ).pipe(Layer.provideMerge(Layer.merge(settingsLayer, migrated)))
    })
  )

/** A `PgClient` built from the connection settings, and the whole substrate over it. */
export const layer = (
  options: Options
): Layer.Layer<Services, DurableConfigError | DatabaseError | SchemaVersionMismatch> =>
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
      return layerOver(rest).pipe(Layer.provideMerge(client))
    })
  )

/** Every variable `layerConfig` reads: what each is for and a value that works. */
export const Variables: Readonly<Record<string, Input.VariableHint>> = {
  ...ConnectionVariables,
  ...Outbox.OutboxOptionsTable.variables,
  ...Inbox.InboxOptionsTable.variables
}

/**
 * `layer` from configuration (see `Variables`): the connection, the settings, the outbox's
 * and the inbox's options, and `CURSOR_KEYS` (optional) to sign keyset cursors. Every
 * variable is read and checked before a connection is opened; a bad one is a
 * `DurableConfigError` naming the variable, what it is for and an example value.
 */
export const layerConfig = (
  options: { readonly migrate?: boolean; readonly checkSchemaVersion?: boolean } = {}
): Layer.Layer<Services, DurableConfigError | DatabaseError | SchemaVersionMismatch> =>
  Layer.unwrap(
    Effect.gen(function*() {
      const connection = yield* ConnectionOptions.fromConfig()
      const settings = yield* SettingsOptions.fromConfig()
      const outbox = yield* Outbox.OutboxOptionsTable.fromConfig()
      const inbox = yield* Inbox.InboxOptionsTable.fromConfig()
      const keys = yield* Effect.mapError(Config.option(Cursor.keyringConfig), (error) =>
        Input.configError(error, Variables))
      const full: Options = {
        connection,
        settings,
        outbox,
        inbox,
        ...options,
        ...(Option.isSome(keys) ? { cursorKeys: keys.value } : {})
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
      return layer(full)
    })
  )

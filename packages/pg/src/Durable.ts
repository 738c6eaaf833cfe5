/**
 * The whole substrate from one configuration: a `PgClient` (and `SqlClient`) built from the
 * connection settings, the validated `DurableSettings`, the `MutationLedger`, `Outbox`,
 * `Inbox` and `Cas`.
 * Users who bring their own `SqlClient` compose the per-service layers instead
 * (`MutationLedger.layer`, `Cas.layer`, `Keyset.layer` with `DurableConfig.layerSettings`).
 *
 * @since 0.1.0
 */
import type { DatabaseError, DurableConfigError } from "@effect-durable/core/Errors"
import * as PgClient from "@effect/sql-pg/PgClient"
import type * as SqlClient from "@effect/sql/SqlClient"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Cas from "./Cas.js"
import {
  config,
  type ConnectionInput,
  DurableSettings,
  fromConfigError,
  makeConnection,
  makeSettings,
  type SettingsInput
} from "./DurableConfig.js"
import { classify } from "./ErrorClassification.js"
import * as Inbox from "./Inbox.js"
import * as Migrations from "./Migrations.js"
import * as MutationLedger from "./MutationLedger.js"
import * as Outbox from "./Outbox.js"

export interface Options {
  readonly connection: ConnectionInput
  readonly settings?: SettingsInput
  readonly outbox?: Outbox.OutboxOptions
  readonly inbox?: Inbox.InboxOptions
  /** Run `Migrations.migrate()` when the layer is built (needs the owner role). Default false. */
  readonly migrate?: boolean
}

export type Services =
  | PgClient.PgClient
  | SqlClient.SqlClient
  | DurableSettings
  | MutationLedger.MutationLedger
  | Outbox.Outbox
  | Inbox.Inbox
  | Cas.Cas

/** The substrate over a `SqlClient` you already have (your pool, your transactions). */
export const layerOver = (
  options: Omit<Options, "connection"> = {}
): Layer.Layer<Exclude<Services, PgClient.PgClient | SqlClient.SqlClient>, DurableConfigError | DatabaseError, SqlClient.SqlClient> =>
  Layer.unwrapEffect(
    Effect.gen(function*() {
      const settings = Layer.succeed(DurableSettings, yield* makeSettings(options.settings))
      yield* Outbox.validateOptions(options.outbox)
      yield* Inbox.validateOptions(options.inbox)
      const migrated = options.migrate === true
        ? Layer.effectDiscard(Migrations.migrate()).pipe(Layer.provide(settings))
        : Layer.empty
      // Layer.fresh: two substrates built in one memo map (two schemas, two databases) stay apart.
      return Layer.mergeAll(
        Layer.fresh(MutationLedger.layer),
        Outbox.layer(options.outbox),
        Inbox.layer(options.inbox),
        Layer.fresh(Cas.layer)
      ).pipe(Layer.provideMerge(Layer.merge(settings, migrated)))
    })
  )

/** A `PgClient` built from the connection settings, and the whole substrate over it. */
export const layer = (options: Options): Layer.Layer<Services, DurableConfigError | DatabaseError> =>
  Layer.unwrapEffect(
    Effect.gen(function*() {
      const connection = yield* makeConnection(options.connection)
      // Everything else is validated before a connection is opened.
      yield* makeSettings(options.settings)
      yield* Outbox.validateOptions(options.outbox)
      yield* Inbox.validateOptions(options.inbox)
      const client = PgClient.layer({
        url: connection.url,
        maxConnections: connection.poolSize,
        connectTimeout: connection.connectTimeout,
        idleTimeout: connection.idleTimeout,
        applicationName: connection.applicationName
      }).pipe(Layer.mapError(classify("Durable.layer")))
      const { connection: _, ...rest } = options
      return layerOver(rest).pipe(Layer.provideMerge(client))
    })
  )

/** `layer` from configuration (see `DurableConfig.config` for the variables and defaults). */
export const layerConfig = (
  options: { readonly migrate?: boolean } = {}
): Layer.Layer<Services, DurableConfigError | DatabaseError> =>
  Layer.unwrapEffect(
    Effect.map(
      Effect.mapError(config, fromConfigError),
      ({ connection, outbox, settings }) => layer({ connection, settings, outbox, ...options })
    )
  )

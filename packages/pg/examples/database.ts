// README "Your application's database": DATABASE_URL when it is set, the development database
// otherwise; the substrate migrated at start, and a schema this code does not know refused.
import * as DevDatabase from "@effect-durable/embedded/DevDatabase"
import * as Durable from "@effect-durable/pg/Durable"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

// DATABASE_URL when it is set; otherwise the development database, started with the app.
export const Database = Durable.layerConfig({ migrate: true }).pipe(Layer.provide(DevDatabase.layerDatabaseUrl()))

// Everything the substrate offers is now in context: the ledger, the outbox, the inbox...
export const program = Effect.map(MutationLedger.MutationLedger, (ledger) => typeof ledger.execute)

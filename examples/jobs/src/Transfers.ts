/**
 * The transfers endpoints. `POST /transfers` runs inside the idempotency middleware's
 * transaction: the transfer, both balances, both entries and the `transfer-completed` outbox
 * message commit together with the stored response — or, on a failure, none of them. Every
 * refusal is decided before the first write, so a stored 4xx never leaves half a transfer.
 */
import * as Outbox from "@effect-durable/pg/Outbox"
import * as Effect from "effect/Effect"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as HttpApiError from "effect/http-api/HttpApiError"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as SqlClient from "effect/sql/SqlClient"
import { AccountNotFound, BankApi, CurrentUser, InsufficientFunds, NotYourAccount, SameAccount } from "./Api.js"

export const TRANSFER_COMPLETED = "transfer-completed"

/** What the outbox carries to the notification service. */
export interface TransferCompleted {
  readonly transfer: number
  readonly from: number
  readonly to: number
  readonly amount: number
}

interface TransferRow {
  readonly id: number
  readonly from_account: number
  readonly to_account: number
  readonly amount: number
  readonly created_at: Date
}

const toTransfer = (row: TransferRow) => ({
  id: row.id,
  from: row.from_account,
  to: row.to_account,
  amount: row.amount,
  createdAt: row.created_at
})

export const TransfersLive = HttpApiBuilder.group(
  BankApi,
  "transfers",
  Effect.fn(function*(handlers) {
    const sql = yield* SqlClient.SqlClient
    const outbox = yield* Outbox.Outbox

    return handlers
      .handle(
        "create",
        // Runs in the idempotency middleware's transaction.
        Effect.fn("Transfers.create")(function*({ payload: { amount, from, to } }) {
          const user = yield* CurrentUser
          if (from === to) return yield* new SameAccount({ account: from })
          // Both accounts locked in id order: opposite transfers at the same time cannot deadlock.
          const accounts = yield* Effect.orDie(sql<{ id: number; owner: string; balance: number }>`
            SELECT id, owner, balance FROM accounts WHERE id IN (${from}, ${to}) ORDER BY id FOR UPDATE`)
          const source = accounts.find((account) => account.id === from)
          if (source === undefined) return yield* new AccountNotFound({ account: from })
          if (source.owner !== user) return yield* new NotYourAccount({ account: from })
          if (!accounts.some((account) => account.id === to)) return yield* new AccountNotFound({ account: to })
          if (source.balance < amount) {
            return yield* new InsufficientFunds({ account: from, balance: source.balance, amount })
          }

          return yield* Effect.gen(function*() {
            const [transfer] = yield* sql<TransferRow>`
              INSERT INTO transfers (from_account, to_account, amount) VALUES (${from}, ${to}, ${amount})
              RETURNING id, from_account, to_account, amount, created_at`
            yield* sql`UPDATE accounts SET balance = balance - ${amount}, revision = revision + 1 WHERE id = ${from}`
            yield* sql`UPDATE accounts SET balance = balance + ${amount}, revision = revision + 1 WHERE id = ${to}`
            yield* sql`INSERT INTO entries ${
              sql.insert([
                { account_id: from, transfer_id: transfer!.id, amount: -amount },
                { account_id: to, transfer_id: transfer!.id, amount }
              ])
            }`
            // Committed with the transfer, or not at all; the projector delivers it afterwards.
            yield* outbox.enqueue(
              TRANSFER_COMPLETED,
              { transfer: transfer!.id, from, to, amount } satisfies TransferCompleted,
              { orderingKey: String(from) }
            )
            return HttpServerResponse.jsonUnsafe(toTransfer(transfer!), {
              status: 201,
              headers: { location: `/transfers/${transfer!.id}` }
            })
          }).pipe(Effect.orDie)
        })
      )
      .handle(
        "get",
        Effect.fn("Transfers.get")(function*({ params }) {
          const user = yield* CurrentUser
          const [row] = yield* Effect.orDie(sql<TransferRow>`
            SELECT t.id, t.from_account, t.to_account, t.amount, t.created_at FROM transfers t
             WHERE t.id = ${params.id}
               AND EXISTS (SELECT 1 FROM accounts a WHERE a.id IN (t.from_account, t.to_account) AND a.owner = ${user})`)
          if (row === undefined) return yield* new HttpApiError.NotFound({})
          return toTransfer(row)
        })
      )
  })
)

/**
 * The accounts endpoints. An account's ETag is its revision: `PUT` renames it only through a
 * compare-and-swap on that revision (`Cas.update`), so two people editing the same version
 * cannot overwrite each other — the second gets 412 and the current ETag. Entries are paged
 * newest first by signed cursors (`Keyset.page`): a cursor works only for the user and the
 * account it was issued for.
 */
import * as Cas from "@effect-durable/pg/Cas"
import * as Keyset from "@effect-durable/pg/Keyset"
import * as Effect from "effect/Effect"
import * as HttpApiBuilder from "effect/http-api/HttpApiBuilder"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Option from "effect/Option"
import * as SqlClient from "effect/sql/SqlClient"
import {
  AccountNotFound,
  BankApi,
  CurrentUser,
  InvalidCursor,
  NotYourAccount,
  PreconditionFailed,
  PreconditionRequired
} from "./Api.js"

interface AccountRow {
  readonly id: number
  readonly owner: string
  readonly name: string
  readonly balance: number
  readonly revision: number
}

/** `"3"` for revision 3: a strong validator, so If-Match compares it exactly. */
export const etagOf = (account: { readonly revision: number }) => `"${account.revision}"`

/** The revision an If-Match value names, if it is one of our ETags. */
const revisionIn = (ifMatch: string): Option.Option<number> => {
  const match = /^\s*"(\d{1,9})"\s*$/.exec(ifMatch)
  return match === null ? Option.none() : Option.some(Number(match[1]))
}

/** The account as JSON, with its ETag. */
const respond = (account: AccountRow, status = 200, location?: string) =>
  HttpServerResponse.jsonUnsafe(account, {
    status,
    headers: { etag: etagOf(account), ...(location === undefined ? {} : { location }) }
  })

export const AccountsLive = HttpApiBuilder.group(
  BankApi,
  "accounts",
  Effect.fn(function*(handlers) {
    const sql = yield* SqlClient.SqlClient
    const cas = yield* Cas.Cas
    const keyset = yield* Keyset.Keyset

    /** The caller's account, or why not. */
    const ownAccount = Effect.fn("Accounts.ownAccount")(function*(id: number) {
      const user = yield* CurrentUser
      const [account] = yield* Effect.orDie(
        sql<AccountRow>`SELECT id, owner, name, balance, revision FROM accounts WHERE id = ${id}`
      )
      if (account === undefined) return yield* new AccountNotFound({ account: id })
      if (account.owner !== user) return yield* new NotYourAccount({ account: id })
      return account
    })

    return handlers
      // Idempotent: the account, its opening entry and the stored response commit together
      // (the idempotency middleware runs this in the ledger's transaction).
      .handle(
        "open",
        Effect.fn("Accounts.open")(function*({ payload }) {
          const user = yield* CurrentUser
          const [account] = yield* sql<AccountRow>`
            INSERT INTO accounts (owner, name, balance) VALUES (${user}, ${payload.name}, ${payload.deposit})
            RETURNING id, owner, name, balance, revision`
          yield* sql`INSERT INTO entries (account_id, amount) VALUES (${account!.id}, ${payload.deposit})`
          return respond(account!, 201, `/accounts/${account!.id}`)
        }, Effect.orDie)
      )
      .handle("get", ({ params }) => Effect.map(ownAccount(params.id), (account) => respond(account)))
      .handle(
        "rename",
        Effect.fn("Accounts.rename")(function*({ headers, params, payload }) {
          const account = yield* ownAccount(params.id)
          const ifMatch = headers["if-match"]
          if (ifMatch === undefined) return yield* new PreconditionRequired({ header: "If-Match" })
          const expected = revisionIn(ifMatch)
          if (Option.isNone(expected)) return yield* new PreconditionFailed({ etag: etagOf(account) })
          yield* cas.update({
            table: "accounts",
            id: params.id,
            expectedRevision: expected.value,
            set: { name: payload.name }
          })
            .pipe(
              Effect.catchTag("CasConflict", (conflict) =>
                Effect.fail(
                  new PreconditionFailed({
                    etag: conflict.actualRevision === null
                      ? null
                      : etagOf({ revision: Number(conflict.actualRevision) })
                  })
                )),
              Effect.catchTag("InvalidInput", Effect.die),
              Effect.catchTag("DatabaseError", Effect.die)
            )
          return respond(yield* ownAccount(params.id))
        })
      )
      .handle(
        "entries",
        Effect.fn("Accounts.entries")(function*({ params, query }) {
          const account = yield* ownAccount(params.id)
          const limit = query.limit ?? 20
          const page = yield* keyset.page<{ id: number; transfer_id: number | null; amount: number; created_at: Date }>(
            {
              table: "entries",
              subject: account.owner, // the cursor only works for this user...
              where: { account_id: account.id }, // ...and this account
              limit,
              ...(query.cursor === undefined ? {} : { cursor: query.cursor })
            }
          ).pipe(
            // A cursor that was tampered with, or issued for another user or account, is the client's 400.
            Effect.catch((error) =>
              error._tag === "InvalidCursor" || error._tag === "CursorBindingMismatch"
                ? Effect.fail(new InvalidCursor({ reason: error.message }))
                : Effect.die(error)
            )
          )
          return {
            items: page.items.map((row) => ({
              id: row.id,
              transfer: row.transfer_id,
              amount: row.amount,
              createdAt: row.created_at
            })),
            next: page.nextCursor === undefined
              ? null
              : `/accounts/${account.id}/entries?limit=${limit}&cursor=${encodeURIComponent(page.nextCursor)}`
          }
        })
      )
      .handle(
        "notifications",
        Effect.fn("Accounts.notifications")(function*({ params }) {
          const account = yield* ownAccount(params.id)
          const rows = yield* Effect.orDie(sql<{ id: number; text: string; created_at: Date }>`
            SELECT id, text, created_at FROM notifications WHERE account_id = ${account.id} ORDER BY id DESC LIMIT 50`)
          return rows.map((row) => ({ id: row.id, text: row.text, createdAt: row.created_at }))
        })
      )
  })
)

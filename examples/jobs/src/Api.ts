/**
 * The bank's HTTP API, as data: what each endpoint takes and answers. The OpenAPI document
 * (`/openapi.json`) and the Swagger UI (`/docs`) are generated from it; the handlers live in
 * Accounts.ts and Transfers.ts.
 *
 * - `POST /accounts`, `POST /transfers`: Idempotency-Key required (a retry is safe).
 * - `GET /accounts/{id}` answers an `ETag`; `PUT /accounts/{id}` needs it back in `If-Match`.
 * - `GET /accounts/{id}/entries`: pages signed by the server, with a `next` link.
 */
import * as Idempotency from "@effect-durable/http/Idempotency"
import * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiError from "effect/http-api/HttpApiError"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiMiddleware from "effect/http-api/HttpApiMiddleware"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as HttpApiSecurity from "effect/http-api/HttpApiSecurity"
import * as OpenApi from "effect/http-api/OpenApi"
import * as Context from "effect/Context"
import * as Schema from "effect/Schema"

// --- who is calling --------------------------------------------------------------------------

/** The authenticated user, for the handlers. */
export class CurrentUser extends Context.Service<CurrentUser, string>()("example/CurrentUser") {}

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("example/Authentication", {
  failure: HttpApiError.Unauthorized,
  provides: CurrentUser,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

// --- what it answers -----------------------------------------------------------------------

/** Amounts are in cents. */
const Cents = Schema.Int.pipe(Schema.positive(), Schema.lessThanOrEqualTo(100_000_000))
const Id = HttpApiSchema.param("id", Schema.NumberFromString.pipe(Schema.int(), Schema.positive()))

export const Account = Schema.Struct({
  id: Schema.Number,
  owner: Schema.String,
  name: Schema.String,
  balance: Schema.Number,
  revision: Schema.Number
})

export const Transfer = Schema.Struct({
  id: Schema.Number,
  from: Schema.Number,
  to: Schema.Number,
  amount: Schema.Number,
  createdAt: Schema.Date
})

export const Entry = Schema.Struct({
  id: Schema.Number,
  transfer: Schema.NullOr(Schema.Number).annotate({ description: "null for the opening deposit" }),
  amount: Schema.Number.annotate({ description: "cents; negative for money sent" }),
  createdAt: Schema.Date
})

export const EntryPage = Schema.Struct({
  items: Schema.Array(Entry),
  next: Schema.NullOr(Schema.String).annotate({ description: "the next page's URL; null on the last page" })
})

export const Notification = Schema.Struct({ id: Schema.Number, text: Schema.String, createdAt: Schema.Date })

// --- how it refuses ------------------------------------------------------------------------

export class AccountNotFound extends Schema.TaggedError<AccountNotFound>()(
  "AccountNotFound",
  { account: Schema.Number },
  HttpApiSchema.annotate({ status: 404 })
) {}

export class NotYourAccount extends Schema.TaggedError<NotYourAccount>()(
  "NotYourAccount",
  { account: Schema.Number },
  HttpApiSchema.annotate({ status: 403 })
) {}

/** A domain rejection: stored by the idempotency middleware, so its retry replays it. */
export class InsufficientFunds extends Schema.TaggedError<InsufficientFunds>()(
  "InsufficientFunds",
  { account: Schema.Number, balance: Schema.Number, amount: Schema.Number },
  HttpApiSchema.annotate({ status: 402 })
) {}

export class SameAccount extends Schema.TaggedError<SameAccount>()(
  "SameAccount",
  { account: Schema.Number },
  HttpApiSchema.annotate({ status: 400 })
) {}

/** If-Match names a revision that is not the current one (someone else saved first). */
export class PreconditionFailed extends Schema.TaggedError<PreconditionFailed>()(
  "PreconditionFailed",
  { etag: Schema.NullOr(Schema.String) },
  HttpApiSchema.annotate({ status: 412 })
) {}

/** PUT without If-Match: the server will not guess which version you edited. */
export class PreconditionRequired extends Schema.TaggedError<PreconditionRequired>()(
  "PreconditionRequired",
  { header: Schema.Literal("If-Match") },
  HttpApiSchema.annotate({ status: 428 })
) {}

export class InvalidCursor extends Schema.TaggedError<InvalidCursor>()(
  "InvalidCursor",
  { reason: Schema.String },
  HttpApiSchema.annotate({ status: 400 })
) {}

// --- the endpoints -------------------------------------------------------------------------

export class Accounts extends HttpApiGroup.make("accounts")
  .add(
    HttpApiEndpoint.post("open")`/accounts`
      .setPayload(Schema.Struct({ name: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(100)), deposit: Cents }))
      .addSuccess(Account, { status: 201 })
      .pipe(Idempotency.endpoint({ required: true }))
      .annotate(OpenApi.Description, "Opens an account with a first deposit. Answers its ETag and Location.")
  )
  .add(
    HttpApiEndpoint.get("get")`/accounts/${Id}`
      .addSuccess(Account)
      .addError(AccountNotFound)
      .addError(NotYourAccount)
      .annotate(OpenApi.Description, "The account; its ETag is its revision.")
  )
  .add(
    HttpApiEndpoint.put("rename")`/accounts/${Id}`
      .setHeaders(Schema.Struct({ "if-match": Schema.optional(Schema.String) }))
      .setPayload(Schema.Struct({ name: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(100)) }))
      .addSuccess(Account)
      .addError(AccountNotFound)
      .addError(NotYourAccount)
      .addError(PreconditionFailed)
      .addError(PreconditionRequired)
      .annotate(OpenApi.Description, "Renames the account if If-Match is its current ETag (compare-and-swap).")
  )
  .add(
    HttpApiEndpoint.get("entries")`/accounts/${Id}/entries`
      .setUrlParams(Schema.Struct({
        limit: Schema.optional(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 100))),
        cursor: Schema.optional(Schema.String)
      }))
      .addSuccess(EntryPage)
      .addError(AccountNotFound)
      .addError(NotYourAccount)
      .addError(InvalidCursor)
      .annotate(OpenApi.Description, "Money in and out of the account, newest first, in pages.")
  )
  .add(
    HttpApiEndpoint.get("notifications")`/accounts/${Id}/notifications`
      .addSuccess(Schema.Array(Notification))
      .addError(AccountNotFound)
      .addError(NotYourAccount)
      .annotate(OpenApi.Description, "What the notification service (the webhook receiver) applied for the account.")
  )
  .middleware(Authentication)
{}

export class Transfers extends HttpApiGroup.make("transfers")
  .add(
    HttpApiEndpoint.post("create")`/transfers`
      .setPayload(Schema.Struct({ from: Schema.Number, to: Schema.Number, amount: Cents }))
      .addSuccess(Transfer, { status: 201 })
      .addError(AccountNotFound)
      .addError(NotYourAccount)
      .addError(InsufficientFunds)
      .addError(SameAccount)
      .pipe(Idempotency.endpoint({ required: true }))
      .annotate(
        OpenApi.Description,
        "Moves money from one of your accounts. The transfer, both balances, two entries and the " +
          "transfer-completed message commit together with the stored response."
      )
  )
  .add(
    HttpApiEndpoint.get("get")`/transfers/${Id}`
      .addSuccess(Transfer)
      .addError(HttpApiError.NotFound)
      .annotate(OpenApi.Description, "A transfer from or to one of your accounts.")
  )
  .middleware(Authentication)
{}

export class BankApi extends HttpApi.make("bank")
  .add(Accounts)
  .add(Transfers)
  .annotate(OpenApi.Title, "effect-durable example bank")
  .annotate(OpenApi.Version, "1.0.0")
  .annotate(
    OpenApi.Description,
    "Demo authentication: `Authorization: Bearer <your name>`. POST endpoints take an Idempotency-Key."
  )
{}

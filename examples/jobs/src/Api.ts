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
import * as Subject from "@effect-durable/http/Subject"
import * as Context from "effect/Context"
import * as HttpApi from "effect/http-api/HttpApi"
import * as HttpApiEndpoint from "effect/http-api/HttpApiEndpoint"
import * as HttpApiError from "effect/http-api/HttpApiError"
import * as HttpApiGroup from "effect/http-api/HttpApiGroup"
import * as HttpApiMiddleware from "effect/http-api/HttpApiMiddleware"
import * as HttpApiSchema from "effect/http-api/HttpApiSchema"
import * as HttpApiSecurity from "effect/http-api/HttpApiSecurity"
import * as OpenApi from "effect/http-api/OpenApi"
import * as Schema from "effect/Schema"

// --- who is calling --------------------------------------------------------------------------

/** The authenticated user, for the handlers. */
export class CurrentUser extends Context.Service<CurrentUser, string>()("example/CurrentUser") {}

/**
 * The API's security: a bearer token is a user (Authentication.ts verifies it). It provides
 * the user to the handlers and, as the idempotency records' `Subject`, to the idempotency
 * middleware it wraps: a refused credential never reaches the ledger.
 */
export class Authentication
  extends HttpApiMiddleware.Service<Authentication, { provides: CurrentUser | Subject.Subject }>()(
    "example/Authentication",
    { error: HttpApiError.UnauthorizedNoContent, security: { bearer: HttpApiSecurity.bearer } }
  )
{}

// --- what it answers -----------------------------------------------------------------------

// Numbers are `Schema.Finite`: plain JSON numbers (`Schema.Number` would also take and give
// the strings "Infinity", "-Infinity" and "NaN").

/** Amounts are in cents. */
const Cents = Schema.Int.check(Schema.isGreaterThan(0), Schema.isLessThanOrEqualTo(100_000_000))
const Id = { id: Schema.NumberFromString.check(Schema.isInt(), Schema.isGreaterThan(0)) }
const Name = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(100))

export const Account = Schema.Struct({
  id: Schema.Finite,
  owner: Schema.String,
  name: Schema.String,
  balance: Schema.Finite,
  revision: Schema.Finite
})

export const Transfer = Schema.Struct({
  id: Schema.Finite,
  from: Schema.Finite,
  to: Schema.Finite,
  amount: Schema.Finite,
  createdAt: Schema.DateFromString
})

export const Entry = Schema.Struct({
  id: Schema.Finite,
  transfer: Schema.NullOr(Schema.Finite).annotate({ description: "null for the opening deposit" }),
  amount: Schema.Finite.annotate({ description: "cents; negative for money sent" }),
  createdAt: Schema.DateFromString
})

export const EntryPage = Schema.Struct({
  items: Schema.Array(Entry),
  next: Schema.NullOr(Schema.String).annotate({ description: "the next page's URL; null on the last page" })
})

export const Notification = Schema.Struct({ id: Schema.Finite, text: Schema.String, createdAt: Schema.DateFromString })

// --- how it refuses ------------------------------------------------------------------------

export class AccountNotFound extends Schema.TaggedError<AccountNotFound>()(
  "AccountNotFound",
  { account: Schema.Finite },
  { httpApiStatus: 404 }
) {}

export class NotYourAccount extends Schema.TaggedError<NotYourAccount>()(
  "NotYourAccount",
  { account: Schema.Finite },
  { httpApiStatus: 403 }
) {}

/** A domain rejection: stored by the idempotency middleware, so its retry replays it. */
export class InsufficientFunds extends Schema.TaggedError<InsufficientFunds>()(
  "InsufficientFunds",
  { account: Schema.Finite, balance: Schema.Finite, amount: Schema.Finite },
  { httpApiStatus: 402 }
) {}

export class SameAccount extends Schema.TaggedError<SameAccount>()(
  "SameAccount",
  { account: Schema.Finite },
  { httpApiStatus: 400 }
) {}

/** If-Match names a revision that is not the current one (someone else saved first). */
export class PreconditionFailed extends Schema.TaggedError<PreconditionFailed>()(
  "PreconditionFailed",
  { etag: Schema.NullOr(Schema.String) },
  { httpApiStatus: 412 }
) {}

/** PUT without If-Match: the server will not guess which version you edited. */
export class PreconditionRequired extends Schema.TaggedError<PreconditionRequired>()(
  "PreconditionRequired",
  { header: Schema.Literal("If-Match") },
  { httpApiStatus: 428 }
) {}

export class InvalidCursor extends Schema.TaggedError<InvalidCursor>()(
  "InvalidCursor",
  { reason: Schema.String },
  { httpApiStatus: 400 }
) {}

// --- the endpoints -------------------------------------------------------------------------

export class Accounts extends HttpApiGroup.make("accounts")
  .add(
    HttpApiEndpoint.post("open", "/accounts", {
      payload: Schema.Struct({ name: Name, deposit: Cents }),
      success: Account.pipe(HttpApiSchema.status(201))
    })
      .pipe(Idempotency.endpoint({ required: true }))
      .annotate(OpenApi.Description, "Opens an account with a first deposit. Answers its ETag and Location."),
    HttpApiEndpoint.get("get", "/accounts/:id", {
      params: Id,
      success: Account,
      error: [AccountNotFound, NotYourAccount]
    })
      .annotate(OpenApi.Description, "The account; its ETag is its revision."),
    HttpApiEndpoint.put("rename", "/accounts/:id", {
      params: Id,
      headers: { "if-match": Schema.optional(Schema.String) },
      payload: Schema.Struct({ name: Name }),
      success: Account,
      error: [AccountNotFound, NotYourAccount, PreconditionFailed, PreconditionRequired]
    })
      .annotate(OpenApi.Description, "Renames the account if If-Match is its current ETag (compare-and-swap)."),
    HttpApiEndpoint.get("entries", "/accounts/:id/entries", {
      params: Id,
      query: {
        limit: Schema.optional(
          Schema.NumberFromString.check(Schema.isInt(), Schema.isBetween({ minimum: 1, maximum: 100 }))
        ),
        cursor: Schema.optional(Schema.String)
      },
      success: EntryPage,
      error: [AccountNotFound, NotYourAccount, InvalidCursor]
    })
      .annotate(OpenApi.Description, "Money in and out of the account, newest first, in pages."),
    HttpApiEndpoint.get("notifications", "/accounts/:id/notifications", {
      params: Id,
      success: Schema.Array(Notification),
      error: [AccountNotFound, NotYourAccount]
    })
      .annotate(OpenApi.Description, "What the notification service (the webhook receiver) applied for the account.")
  )
  // After the endpoints: it wraps their idempotency middleware.
  .middleware(Authentication)
{}

export class Transfers extends HttpApiGroup.make("transfers")
  .add(
    HttpApiEndpoint.post("create", "/transfers", {
      payload: Schema.Struct({ from: Schema.Finite, to: Schema.Finite, amount: Cents }),
      success: Transfer.pipe(HttpApiSchema.status(201)),
      error: [AccountNotFound, NotYourAccount, InsufficientFunds, SameAccount]
    })
      .pipe(Idempotency.endpoint({ required: true }))
      .annotate(
        OpenApi.Description,
        "Moves money from one of your accounts. The transfer, both balances, two entries and the " +
          "transfer-completed message commit together with the stored response."
      ),
    HttpApiEndpoint.get("get", "/transfers/:id", {
      params: Id,
      success: Transfer,
      error: HttpApiError.NotFoundNoContent
    })
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
  // A request that does not decode is a 400 problem naming the field, not an empty 400.
  .middleware(HttpApiMiddleware.ProblemDetails)
{}

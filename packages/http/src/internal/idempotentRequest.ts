/**
 * One request with an Idempotency-Key, through the ledger. Everything refused before the
 * handler (key, subject, body) is answered without a transaction. Then, in one transaction:
 * the ledger's claim (an exact repeat replays, another request with the key is 422, one in
 * flight is 409), the handler — its writes and outbox messages join the transaction — and
 * the stored response. The transaction commits only when the response is stored (or the
 * handler never began); a 5xx, a defect, an interruption or a response that cannot be
 * stored rolls everything back. The response is sent after COMMIT returned.
 */
import type { BeginError, RecordError } from "@effect-durable/pg/MutationLedger"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import { classify } from "@effect-durable/pg/ErrorClassification"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as SqlClient from "effect/sql/SqlClient"
import { SqlError } from "effect/sql/SqlError"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import * as Option from "effect/Option"
import * as IdempotencyKey from "../IdempotencyKey.js"
import * as Problem from "../Problem.js"
import { Subject } from "../Subject.js"
import * as Marker from "./execution.js"
import type { Settings } from "./options.js"
import * as RequestBody from "./requestBody.js"
import * as RequestFingerprint from "./requestFingerprint.js"
import * as StoredResponse from "./storedResponse.js"

/** How one route takes part. */
export interface Route {
  /** A request without the key is refused (400); otherwise it runs without the ledger. */
  readonly required: boolean
}

/**
 * Who says when execution began: `marked` for HttpApi handlers (`Idempotency.executing`),
 * `entry` for a plain handler, which begins when it is called.
 */
export type Execution = "marked" | "entry"

/** Every HTTP record has this kind and no eligibility claim: the fingerprint carries the request. */
const KIND = "http"
const NO_ELIGIBILITY = new Uint8Array(0)

/** Leaves the transaction, rolling it back, and answers `response`. */
class Answer {
  constructor(readonly response: HttpServerResponse.HttpServerResponse) {}
}

export const make = (settings: Settings) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const ledger = yield* MutationLedger.MutationLedger
    const problem = (name: Problem.ProblemName, detail: string, headers?: Readonly<Record<string, string>>) =>
      Problem.response(Problem.make(name, detail, settings.problemTypeBase), headers)
    const retryAfter = { "retry-after": String(settings.retryAfterSeconds) }
    const header = settings.headerName
    const inFlight = problem(
      "keyInFlight",
      `The first request with this ${header} has not completed; retry the same request later.`,
      retryAfter
    )
    const databaseProblem = (error: { readonly retryable: boolean }) =>
      error.retryable
        ? problem("databaseUnavailable", "The database could not complete the request; retry it.", retryAfter)
        : problem("databaseError", "The database refused the request.")

    const refuse = (error: BeginError | RecordError): Effect.Effect<never, Answer> => {
      switch (error._tag) {
        case "MutationConflict":
          return Effect.fail(
            new Answer(problem(
              "keyReused",
              `This ${header} was used for a request with another method, target or body; resend that request, or use a new key.`
            ))
          )
        case "MutationInProgress":
          return Effect.fail(new Answer(inFlight))
        case "DatabaseError":
          // Waiting for the first request ran past the lock timeout: it is still in flight.
          return Effect.fail(new Answer(error.code === "55P03" && settings.inFlight === "wait" ? inFlight : databaseProblem(error)))
        case "PayloadTooLarge":
        case "UnsupportedJsonValue":
          return Effect.fail(new Answer(problem("responseNotStorable", "The response could not be stored.")))
        case "InvalidInput":
          // A subject or route pattern beyond the ledger's bounds: the application's bug.
          return Effect.die(error)
      }
    }

    const warned = new Set<string>()
    const warnUnmarked = (operation: string, response: HttpServerResponse.HttpServerResponse) =>
      response.status >= 300 || warned.has(operation)
        ? Effect.void
        : Effect.andThen(
          Effect.sync(() => warned.add(operation)),
          Effect.logWarning(
            `effect-durable: ${operation} answered ${response.status} without Idempotency.executing around its handler: ` +
              "its responses are not stored and retries run again"
          )
        )

    /** The answers given without a transaction; the request's key, subject and body otherwise. */
    const admit = (request: HttpServerRequest.HttpServerRequest, route: Route) =>
      Effect.gen(function*() {
        const field = request.headers[settings.header]
        if (field === undefined) {
          return route.required
            ? Result.fail(problem("keyMissing", `This endpoint requires the ${header} header.`))
            : Result.succeed(Option.none())
        }
        const key = IdempotencyKey.parse(field, settings.bounds)
        if (Result.isFailure(key)) return Result.fail(problem("keyInvalid", key.failure.reason))
        const subject = yield* Subject
        if (Option.isNone(subject)) {
          return Result.fail(problem("unauthenticated", `Authenticate to send a request with ${header}.`))
        }
        const contentType = request.headers["content-type"]
        if (contentType !== undefined && contentType.toLowerCase().startsWith("multipart/")) {
          return Result.fail(problem("bodyUnsupported", "Send the body as JSON, text, a form (urlencoded) or bytes."))
        }
        const read = yield* Effect.result(RequestBody.read(request, settings.maxRequestBytes))
        // The body broke off (the client went away): the 400 the platform gives a body it cannot read.
        if (Result.isFailure(read)) return Result.fail(HttpServerResponse.empty({ status: 400 }))
        const body = read.success
        if (Result.isFailure(body)) {
          // The rest of the body is discarded, not read: the connection cannot be reused.
          return Result.fail(problem(
            "bodyTooLarge",
            `A request with ${header} has a body of at most ${settings.maxRequestBytes} bytes.`,
            { connection: "close" }
          ))
        }
        return Result.succeed(Option.some({ key: key.success, subject: subject.value, contentType, body: body.success }))
      })

    /** A failure of BEGIN or COMMIT (a defect in @effect/sql) and `Answer`s become responses. */
    const settle = <E, R>(
      effect: Effect.Effect<HttpServerResponse.HttpServerResponse, E | Answer | SqlError, R>
    ): Effect.Effect<HttpServerResponse.HttpServerResponse, E, R> =>
      Effect.catchCause(effect, (cause) => {
        const failure = Cause.findErrorOption(cause)
        if (Option.isSome(failure) && failure.value instanceof Answer) return Effect.succeed(failure.value.response)
        if (Option.isSome(failure) && failure.value instanceof SqlError) {
          return Effect.succeed(databaseProblem(classify("Idempotency")(failure.value)))
        }
        const defect = Cause.findDefect(cause)
        if (Option.isSome(defect) && defect.value instanceof SqlError && !Cause.hasInterrupts(cause)) {
          return Effect.succeed(databaseProblem(classify("Idempotency")(defect.value)))
        }
        // Answer and SqlError are handled above; what is left is the handler's own.
        return Effect.failCause(cause as Cause.Cause<E>)
      })

    return <E, R>(
      route: Route,
      path: string,
      execution: Execution,
      handler: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
    ): Effect.Effect<
      HttpServerResponse.HttpServerResponse,
      E,
      R | Subject | HttpServerRequest.HttpServerRequest
    > =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        if (!settings.methods.has(request.method)) return yield* handler
        const admitted = yield* admit(request, route)
        if (Result.isFailure(admitted)) return admitted.failure
        if (Option.isNone(admitted.success)) return yield* handler
        const { body, contentType, key, subject } = admitted.success.value
        const operation = `${request.method} ${path}`
        const identity = { subject, operation, key }
        const fingerprint = yield* RequestFingerprint.of(request.method, request.originalUrl, contentType, body)
        const marker: Marker.Marker = { began: execution === "entry" }
        const run = handler.pipe(
          Effect.provideService(HttpServerRequest.HttpServerRequest, RequestBody.buffered(request, body)),
          Marker.within(marker)
        )

        return yield* settle(sql.withTransaction(Effect.gen(function*() {
          const begun = yield* Effect.catch(
            ledger.begin(identity, { kind: KIND, eligibility: NO_ELIGIBILITY, fingerprint }, {
              wait: settings.inFlight === "wait"
            }),
            refuse
          )
          if (begun._tag === "Replay") {
            yield* Effect.annotateCurrentSpan("idempotency.outcome", "replay")
            return StoredResponse.replay(begun.outcome.body, begun.outcome.meta, settings.replayHeader)
          }
          const response = yield* run
          if (!marker.began) {
            // Refused inside the route before the handler (a payload that does not decode, the
            // API's own 401): nothing was written and nothing is stored; the corrected retry runs.
            yield* warnUnmarked(operation, response)
            return response
          }
          if (response.status >= 500) return yield* Effect.fail(new Answer(response))
          const captured = yield* StoredResponse.capture(response, {
            maxBytes: settings.maxResponseBytes,
            storedHeaders: settings.storedHeaders
          })
          if (Option.isNone(captured)) {
            return yield* Effect.fail(
              new Answer(problem("responseNotStorable", "The response is too large or streamed in a form that cannot be stored."))
            )
          }
          const { body, meta } = captured.value
          yield* Effect.catch(
            begun.record(MutationLedger.bytes(response.status < 400 ? "accepted" : "rejected", body, meta)),
            refuse
          )
          yield* Effect.annotateCurrentSpan("idempotency.outcome", "first")
          return captured.value.response
        })))
      }).pipe(Effect.withSpan("idempotency.request", { attributes: { "http.route": path } }))
  })

/**
 * One request with an Idempotency-Key, through the ledger. Everything refused before the
 * handler (key, subject, body size, JSON nested too deep) is answered without a transaction.
 * Then, in one transaction: the ledger's claim (an exact repeat replays, another request
 * with the key is 422, one in flight is 409), the handler — its writes and outbox messages
 * join the transaction — and the stored response. The transaction commits only when the
 * response is stored; a failure (a request that does not decode, a defect, an error with no
 * response below 500), a 5xx, an interruption or a response that cannot be stored rolls
 * everything back. The response is sent after COMMIT returned.
 */
import type { RequestFingerprint as Fingerprint } from "@effect-durable/core/Fingerprint"
import { classify } from "@effect-durable/pg/ErrorClassification"
import type { BeginError, RecordError } from "@effect-durable/pg/MutationLedger"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Option from "effect/Option"
import * as Result from "effect/Result"
import * as SqlClient from "effect/sql/SqlClient"
import { SqlError } from "effect/sql/SqlError"
import * as IdempotencyKey from "../IdempotencyKey.js"
import * as Problem from "../Problem.js"
import { Subject } from "../Subject.js"
import * as JsonDepth from "./jsonDepth.js"
import type { Settings } from "./options.js"
import * as RequestBody from "./requestBody.js"
import * as RequestFingerprint from "./requestFingerprint.js"
import * as StoredResponse from "./storedResponse.js"

/** How one route takes part. */
export interface Route {
  /** A request without the key is refused (400); otherwise it runs without the ledger. */
  readonly required: boolean
  /** Not idempotent: a request with the key is refused (400) before anything runs; one without it runs. */
  readonly refuseKey?: boolean
  /**
   * The answer the route gives before its handler runs, when it gives one that is not a
   * failure (HttpApi's 415 for a Content-Type it does not decode): given here once the key is
   * found free (another request with the key is still 422), and rolled back, never stored.
   */
  readonly answerBeforeHandler?: (
    request: HttpServerRequest.HttpServerRequest
  ) => HttpServerResponse.HttpServerResponse | undefined
  /**
   * Whether the route parses this request's body as JSON, whose depth is then bounded
   * (`maxJsonDepth`). Default: a JSON Content-Type (`application/json`, `*+json`).
   */
  readonly parsesJson?: (request: HttpServerRequest.HttpServerRequest) => boolean
}

/** Every HTTP record has this kind and no eligibility claim: the fingerprint carries the request. */
const KIND = "http"
const NO_ELIGIBILITY = new Uint8Array(0)

/** Leaves the transaction, rolling it back, and answers `response`. */
class Answer {
  constructor(readonly response: HttpServerResponse.HttpServerResponse) {}
}

/** What the middleware makes of a request before any transaction. */
type Admission =
  | { readonly _tag: "Answer"; readonly response: HttpServerResponse.HttpServerResponse }
  | { readonly _tag: "Pass" }
  | {
    readonly _tag: "Admitted"
    readonly key: string
    readonly subject: string
    readonly contentType: string | undefined
    readonly body: Uint8Array
  }

const PASS: Admission = { _tag: "Pass" }
const answer = (response: HttpServerResponse.HttpServerResponse): Admission => ({ _tag: "Answer", response })

/**
 * The request target as sent, path and query: `originalUrl` without the scheme and host it
 * carries in Effect 4 (a retry through another host name is the same request).
 */
const targetOf = (request: HttpServerRequest.HttpServerRequest) =>
  request.originalUrl.replace(/^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/, "")

export const make = Effect.fnUntraced(function*(settings: Settings) {
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
  const tooDeep = problem("bodyTooDeep", `A JSON body nests arrays and objects at most ${settings.maxJsonDepth} deep.`)
  const parsesJson = (route: Route, request: HttpServerRequest.HttpServerRequest) =>
    route.parsesJson?.(request) ?? JsonDepth.isJsonContentType(request.headers["content-type"])
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
        return Effect.fail(
          new Answer(error.code === "55P03" && settings.inFlight === "wait" ? inFlight : databaseProblem(error))
        )
      case "PayloadTooLarge":
      case "UnsupportedJsonValue":
        return Effect.fail(new Answer(problem("responseNotStorable", "The response could not be stored.")))
      case "InvalidInput":
        // A subject or route pattern beyond the ledger's bounds: the application's bug.
        return Effect.die(error)
    }
  }

  /** The answers given without a transaction; the request's key, subject and body otherwise. */
  const admit = Effect.fnUntraced(function*(request: HttpServerRequest.HttpServerRequest, route: Route) {
    const field = request.headers[settings.header]
    if (route.refuseKey === true) {
      return field === undefined ? PASS : answer(problem(
        "keyUnsupported",
        `This endpoint is not idempotent: a retry with the same ${header} would run it again. Send the request without the ${header} header.`
      ))
    }
    if (field === undefined) {
      return route.required ? answer(problem("keyMissing", `This endpoint requires the ${header} header.`)) : PASS
    }
    const key = IdempotencyKey.parse(field, settings.bounds)
    if (Result.isFailure(key)) return answer(problem("keyInvalid", key.failure.reason))
    const subject = yield* Subject
    if (Option.isNone(subject)) {
      return answer(problem("unauthenticated", `Authenticate to send a request with ${header}.`))
    }
    const contentType = request.headers["content-type"]
    if (contentType !== undefined && contentType.toLowerCase().startsWith("multipart/")) {
      return answer(problem("bodyUnsupported", "Send the body as JSON, text, a form (urlencoded) or bytes."))
    }
    const read = yield* Effect.result(RequestBody.read(request, settings.maxRequestBytes))
    // The body broke off (the client went away): the 400 the platform gives a body it cannot read.
    if (Result.isFailure(read)) return answer(HttpServerResponse.empty({ status: 400 }))
    const body = read.success
    if (Result.isFailure(body)) {
      // Answered once the rest was received and discarded (bounded): the close cannot reset it.
      return answer(problem(
        "bodyTooLarge",
        `A request with ${header} has a body of at most ${settings.maxRequestBytes} bytes.`,
        { connection: "close" }
      ))
    }
    // Refused before anything parses it: a recursive decoder would overflow the stack (a 500).
    if (
      parsesJson(route, request) && JsonDepth.exceeds(new TextDecoder().decode(body.success), settings.maxJsonDepth)
    ) {
      return answer(tooDeep)
    }
    const admitted: Admission = {
      _tag: "Admitted",
      key: key.success,
      subject: subject.value,
      contentType,
      body: body.success
    }
    return admitted
  })

  /**
   * A request that runs without the ledger (no key, or a method the ledger ignores): the
   * handler reads the body itself, and a JSON body nested too deep is refused all the same,
   * 400, when it is read (HttpApi makes that read's failure a defect; it becomes the 400).
   */
  const unkeyed = <E, R>(
    request: HttpServerRequest.HttpServerRequest,
    route: Route,
    handler: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
  ): Effect.Effect<HttpServerResponse.HttpServerResponse, E, R> =>
    !parsesJson(route, request) ? handler : Effect.provideService(
      handler,
      HttpServerRequest.HttpServerRequest,
      RequestBody.depthGuarded(request, settings.maxJsonDepth)
    ).pipe(Effect.catchCauseIf((cause: Cause.Cause<E>) => RequestBody.isTooDeep(cause), () => Effect.succeed(tooDeep)))

  /** `Answer`s and the failures of BEGIN or COMMIT become responses; the rest is the handler's own. */
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
      if (Result.isSuccess(defect) && defect.success instanceof SqlError && !Cause.hasInterrupts(cause)) {
        return Effect.succeed(databaseProblem(classify("Idempotency")(defect.success)))
      }
      // Answer and SqlError are handled above; what is left is the handler's own.
      return Effect.failCause(cause as Cause.Cause<E>)
    })

  /** Inside the transaction: claim, run, store. */
  const transaction = Effect.fnUntraced(function*(
    before: HttpServerResponse.HttpServerResponse | undefined,
    identity: MutationLedger.MutationIdentity,
    fingerprint: Fingerprint,
    run: Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, unknown>
  ) {
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
    // Refused before the handler, after the key was found free: the corrected retry runs.
    if (before !== undefined) return yield* Effect.fail(new Answer(before))
    const response = yield* run
    if (response.status >= 500) return yield* Effect.fail(new Answer(response))
    const captured = yield* StoredResponse.capture(response, {
      maxBytes: settings.maxResponseBytes,
      storedHeaders: settings.storedHeaders
    })
    if (Option.isNone(captured)) {
      return yield* Effect.fail(
        new Answer(
          problem("responseNotStorable", "The response is too large or streamed in a form that cannot be stored.")
        )
      )
    }
    const { body, meta } = captured.value
    yield* Effect.catch(
      begun.record(MutationLedger.bytes(response.status < 400 ? "accepted" : "rejected", body, meta)),
      refuse
    )
    yield* Effect.annotateCurrentSpan("idempotency.outcome", "first")
    return captured.value.response
  })

  const idempotentRequest = Effect.fn("idempotency.request")(function*(
    route: Route,
    path: string,
    handler: Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, unknown>
  ) {
    yield* Effect.annotateCurrentSpan("http.route", path)
    const request = yield* HttpServerRequest.HttpServerRequest
    if (!settings.methods.has(request.method)) return yield* unkeyed(request, route, handler)
    const admitted = yield* admit(request, route)
    if (admitted._tag === "Answer") return admitted.response
    if (admitted._tag === "Pass") return yield* unkeyed(request, route, handler)
    const { body, contentType, key, subject } = admitted
    const identity = { subject, operation: `${request.method} ${path}`, key }
    const fingerprint = yield* RequestFingerprint.of(request.method, targetOf(request), contentType, body)
    const run = Effect.provideService(handler, HttpServerRequest.HttpServerRequest, RequestBody.buffered(request, body))
    const before = route.answerBeforeHandler?.(request)
    return yield* settle(sql.withTransaction(transaction(before, identity, fingerprint, run)))
  })

  /**
   * Runs `handler` for a request of the route `path` (the route pattern, which names the
   * operation with the method): through the ledger when it carries a key.
   */
  return <E, R>(
    route: Route,
    path: string,
    handler: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>
  ): Effect.Effect<HttpServerResponse.HttpServerResponse, E, R | Subject | HttpServerRequest.HttpServerRequest> =>
    idempotentRequest(route, path, handler) as Effect.Effect<
      HttpServerResponse.HttpServerResponse,
      E,
      R | Subject | HttpServerRequest.HttpServerRequest
    >
})

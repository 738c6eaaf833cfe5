/**
 * Who is calling. Demo authentication: `Authorization: Bearer <name>` is the user `<name>`
 * (lowercase letters, digits and dashes) — put your identity provider here. One `verify`
 * serves both places that need it: the API's security middleware (for the handlers) and
 * `Subject.identify` (for the idempotency middleware, which runs before the API's security
 * and keys every stored response by the subject).
 */
import * as Subject from "@effect-durable/http/Subject"
import * as HttpApiError from "effect/http-api/HttpApiError"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { Authentication } from "./Api.js"

const TOKEN = /^[a-z][a-z0-9-]{0,31}$/

/** The user a bearer token stands for. */
export const verify = (token: string): Option.Option<string> => TOKEN.test(token) ? Option.some(token) : Option.none()

export const AuthenticationLive = Layer.succeed(
  Authentication,
  Authentication.of({
    bearer: (token) =>
      Option.match(verify(Redacted.value(token)), {
        onNone: () => Effect.fail(new HttpApiError.Unauthorized()),
        onSome: Effect.succeed
      })
  })
)

/** The subject of the idempotency records: the same user, read from the same header. */
export const Identify = Subject.identify((request) => {
  const header = request.headers.authorization ?? ""
  return Effect.succeed(header.startsWith("Bearer ") ? verify(header.slice("Bearer ".length)) : Option.none())
})

/**
 * Who is calling. Demo authentication: `Authorization: Bearer <name>` is the user `<name>`
 * (lowercase letters, digits and dashes) — put your identity provider here. The API's
 * security middleware gives the user to the handlers (`CurrentUser`) and to the idempotency
 * middleware it wraps (`Subject`, which keys every stored response by the user).
 */
import * as Subject from "@effect-durable/http/Subject"
import * as Effect from "effect/Effect"
import * as HttpApiError from "effect/http-api/HttpApiError"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { Authentication, CurrentUser } from "./Api.js"

const TOKEN = /^[a-z][a-z0-9-]{0,31}$/

/** The user a bearer token stands for. */
export const verify = (token: string): Option.Option<string> => TOKEN.test(token) ? Option.some(token) : Option.none()

export const AuthenticationLive = Layer.succeed(
  Authentication,
  Authentication.of({
    bearer: (httpEffect, { credential }) =>
      Option.match(verify(Redacted.value(credential)), {
        onNone: () => Effect.fail(new HttpApiError.Unauthorized({})),
        onSome: (user) =>
          httpEffect.pipe(
            Effect.provideService(CurrentUser, user),
            Effect.provideService(Subject.Subject, Option.some(user))
          )
      })
  })
)

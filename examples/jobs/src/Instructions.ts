/** What `npm start` prints once it listens: where it is, and curl lines to try it with. */
import * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as HttpServer from "effect/http/HttpServer"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { seedAccounts } from "./Seed.js"

/** The server's URL (it listens on 127.0.0.1, see Server.ts). */
export const baseUrl = Effect.flatMap(HttpServer.HttpServer, ({ address }) =>
  address._tag === "UnixPathAddress"
    ? Effect.die(new Error(`the server listens on a Unix socket (${address.path}), not on a port`))
    : Effect.succeed(`http://127.0.0.1:${address.port}`))

export const InstructionsLive = Layer.effectDiscard(Effect.gen(function*() {
  const url = yield* baseUrl
  const { alice, bob } = yield* seedAccounts
  // The environment's own DATABASE_URL (the development database supplies one to the substrate).
  const database = yield* Effect.orElseSucceed(
    Effect.provideService(
      Config.option(Config.String("DATABASE_URL")),
      ConfigProvider.ConfigProvider,
      ConfigProvider.fromEnv()
    ),
    () => Option.none()
  )
  const json = `-H 'Content-Type: application/json'`
  const as = (user: string) => `-H 'Authorization: Bearer ${user}'`
  yield* Console.log(`
The bank listens on ${url}  (Ctrl-C stops it)
  Swagger UI     ${url}/docs
  OpenAPI        ${url}/openapi.json
  PostgreSQL     ${
    Option.isSome(database)
      ? "DATABASE_URL"
      : "the development database (.effect-durable/postgres; its URL is logged above)"
  }

Try it (alice owns account ${alice.id}, bob account ${bob.id}; a token is a user's name):

URL=${url}
# The account and its ETag; rename it with If-Match (again: 412, the ETag moved on; without: 428)
curl -i $URL/accounts/${alice.id} ${as("alice")}
curl -i -X PUT $URL/accounts/${alice.id} ${
    as("alice")
  } ${json} -H 'If-Match: "${alice.revision}"' -d '{"name":"Alice main"}'
curl -i -X PUT $URL/accounts/${alice.id} ${
    as("alice")
  } ${json} -H 'If-Match: "${alice.revision}"' -d '{"name":"Alice old"}'
curl -i -X PUT $URL/accounts/${alice.id} ${as("alice")} ${json} -d '{"name":"Alice main"}'
# Move 25.00 to bob; send it twice: the second answer is the first one, replayed (Idempotent-Replayed: true)
curl -i -X POST $URL/transfers ${
    as("alice")
  } ${json} -H 'Idempotency-Key: rent-1' -d '{"from":${alice.id},"to":${bob.id},"amount":2500}'
# The same key with another amount: 422
curl -i -X POST $URL/transfers ${
    as("alice")
  } ${json} -H 'Idempotency-Key: rent-1' -d '{"from":${alice.id},"to":${bob.id},"amount":9900}'
# Alice's entries, one per page: follow "next"
curl -s "$URL/accounts/${alice.id}/entries?limit=1" ${as("alice")}
# What the notification service received through the webhook (applied once through the inbox)
curl -s $URL/accounts/${bob.id}/notifications ${as("bob")}
# Open an account of your own
curl -i -X POST $URL/accounts ${
    as("carol")
  } ${json} -H 'Idempotency-Key: open-carol' -d '{"name":"Carol","deposit":10000}'
`)
}))

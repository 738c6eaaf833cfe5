#!/usr/bin/env node
// CI's check of the README's `npm start`, as a newcomer runs it: the example service starts on
// the development database, prints its URL, answers there (its OpenAPI document, an account
// read with a demo token), and Ctrl-C (SIGINT to the whole process group, as a terminal sends
// it) stops it: npm ends (npm itself dies of the SIGINT, as in a terminal) and the development
// database it started is stopped with it (no postmaster.pid left).
import { spawn } from "node:child_process"
import { existsSync } from "node:fs"

const TIMEOUT_MS = 180_000
const fail = (message) => {
  console.error(`start-check: ${message}`)
  process.exit(1)
}

const child = spawn("npm", ["start"], { detached: true, stdio: ["ignore", "pipe", "inherit"] })
const timer = setTimeout(() => {
  process.kill(-child.pid, "SIGKILL")
  fail(`npm start did not print its URL, answer and stop within ${TIMEOUT_MS / 1000} s`)
}, TIMEOUT_MS)

let output = ""
const listening = new Promise((resolve) => {
  child.stdout.on("data", (chunk) => {
    process.stdout.write(chunk)
    output += chunk
    const found = /The bank listens on (http:\/\/127\.0\.0\.1:\d+)/.exec(output)
    if (found !== null) resolve(found[1])
  })
})
const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })))

const url = await Promise.race([listening, exited.then(({ code }) => ({ exitedFirst: code }))])
if (typeof url !== "string") fail(`npm start exited (${url.exitedFirst}) before it listened`)
const openapi = await fetch(`${url}/openapi.json`)
if (openapi.status !== 200) fail(`GET /openapi.json answered ${openapi.status}`)
const account = /alice owns account (\d+)/.exec(output)?.[1] ?? fail("no account of alice printed")
const read = await fetch(`${url}/accounts/${account}`, { headers: { authorization: "Bearer alice" } })
if (read.status !== 200) fail(`GET /accounts/${account} as alice answered ${read.status}`)
console.log(`start-check: ${url} answered (openapi.json 200, account ${account} 200); stopping with SIGINT`)

process.kill(-child.pid, "SIGINT")
const { code, signal } = await exited
if (!(code === 0 || code === 130 || signal === "SIGINT")) fail(`npm start ended with ${signal ?? `exit code ${code}`}`)
const pidFile = "examples/jobs/.effect-durable/postgres/data/postmaster.pid"
while (existsSync(pidFile)) await new Promise((resolve) => setTimeout(resolve, 100))
clearTimeout(timer)
console.log("start-check: npm start stopped on SIGINT, and its development database with it")

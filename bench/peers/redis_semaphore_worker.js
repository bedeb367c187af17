// redis_semaphore_worker.js - one worker process of `make bench-peers` for npm's redis-semaphore
// (Semaphore, its documented defaults but for acquireTimeout, raised so that waits are measured,
// not failed), with the same loop as dbt_worker.c: until END, acquire, count itself in the
// independent holder counter, hold H ms, uncount, release; cycles inside [START, END] recorded.
// usage: node redis_semaphore_worker.js REDIS_PORT COUNTER_PORT LIMIT HOLD_MS START_MS END_MS OUT
'use strict';
const fs = require('fs');
const { Semaphore } = require('redis-semaphore');
const Redis = require('ioredis');

const [port, ctrPort, limit, hold, start, end, out] = process.argv.slice(2);
const COUNT_UP = "local n = redis.call('INCR', KEYS[1]) " +
    "if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end return n";

async function main() {
    const redis = new Redis({ port: +port, host: '127.0.0.1' });
    const ctr = new Redis({ port: +ctrPort, host: '127.0.0.1' });
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    const waits = [];
    let held = 0, cycles = 0;
    for (;;) {
        const t0 = performance.timeOrigin + performance.now(); // epoch ms, sub-ms precision
        if (t0 >= +end) break;
        const sem = new Semaphore(redis, 'peers', +limit, { acquireTimeout: 120000 });
        await sem.acquire();
        const t1 = performance.timeOrigin + performance.now();
        await ctr.eval(COUNT_UP, 2, 'holders', 'most');
        if (+hold > 0) await sleep(+hold);
        await ctr.decr('holders');
        const t2 = performance.timeOrigin + performance.now();
        await sem.release();
        if (t0 >= +start && t2 <= +end) {
            waits.push((t1 - t0).toFixed(3));
            held += t2 - t1;
            cycles++;
        }
    }
    fs.writeFileSync(out, `cycles ${cycles}\nheld_ms ${held.toFixed(3)}\n` + waits.join('\n') + '\n');
    redis.disconnect();
    ctr.disconnect();
}
main().catch((e) => { console.error(e); process.exit(1); });

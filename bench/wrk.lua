-- The wrk script of bench.harness.run_wrk(), which puts a prelude before it: HOST; COUNT, the requests
-- to send (0: as many as wrk's -d allows), each thread stopping after its share (wrk itself only knows
-- durations); OUT, a file prefix (or ""): each answer whose X-Request-ID names a request is written to
-- OUT<thread> as status, latency in us, error code, X-Bench-SQL, the answer's CLOCK_MONOTONIC in us; and the
-- requests: REQUESTS, raw requests to cycle through, or else request k numbered PREFIX .. k (its X-Request-ID,
-- and Idempotency-Key): GET /healthz, or POST /api/orders by TOKENS[WHO[k]] when there are TOKENS. Thread t
-- of T sends t+1, t+1+T, ...
local ffi = require("ffi")
ffi.cdef[[ typedef struct { long tv_sec; long tv_nsec; } bench_ts; int clock_gettime(int, bench_ts *); ]]
local ts = ffi.new("bench_ts")
local function now_us() ffi.C.clock_gettime(1, ts); return tonumber(ts.tv_sec) * 1e6 + tonumber(ts.tv_nsec) / 1e3 end

local function build(k)
  if #REQUESTS > 0 then return REQUESTS[(k - 1) % #REQUESTS + 1] end
  local rid, first = PREFIX .. k, "GET /healthz HTTP/1.1"
  if #TOKENS > 0 then
    first = "POST /api/orders HTTP/1.1\r\nAuthorization: Token " .. TOKENS[WHO[k]] .. "\r\nIdempotency-Key: " .. rid
  end
  return first .. "\r\nHost: " .. HOST .. "\r\nX-Request-ID: " .. rid .. "\r\nContent-Length: 0\r\n\r\n", rid
end

local threads, counter = {}, 0
function setup(thread) thread:set("id", counter); counter = counter + 1; table.insert(threads, thread) end

local stride, first, limit, issued, answered, sent, out, started, verifying
function init(args)
  verifying, stride, first, limit, issued, answered, sent = (id == 0), tonumber(args[1]), id + 1, 0, 0, 0, {}
  if COUNT > 0 then for k = first, COUNT, stride do limit = limit + 1 end end
  if OUT ~= "" then out = io.open(OUT .. id, "w") end
end

function request()
  -- wrk calls request() once on thread 0 only to check it: that request is never sent
  if verifying then verifying = false; return (build(first)) end
  if COUNT > 0 and issued >= limit then return "" end  -- all sent: the connection stays idle
  local req, rid = build(first + issued * stride)
  issued = issued + 1
  local t = now_us()
  if started == nil then started = t end
  if rid then sent[rid] = t end
  return req
end

local function on_response(status, headers, body)
  local t = now_us()
  if out then
    local rid = headers["X-Request-ID"]
    local t0 = rid and sent[rid]
    if not t0 then return end
    sent[rid] = nil
    local code = "-"
    if status >= 400 then code = string.match(body or "", '"code"%s*:%s*"([^"]*)"') or "?" end
    out:write(status, " ", string.format("%.0f", t - t0), " ", code, " ", headers["X-Bench-SQL"] or "-", " ",
              string.format("%.0f", t), "\n")
  end
  answered = answered + 1
  if answered % 250 == 0 then
    if out then out:flush() end
    io.write("P 250\n"); io.flush()
  end
  if answered == limit then
    wrk.thread:set("elapsed", t - started)
    if out then out:close() end
    io.write("P ", answered % 250, "\nBENCH_THREAD_DONE\n"); io.flush()
    wrk.thread:stop()
  end
end
-- Only when needed: with a response() function, wrk hands every answer's headers and body to Lua.
if COUNT > 0 or OUT ~= "" then response = on_response end

function done(summary, latency, requests)
  local longest, e = 0, summary.errors
  for _, t in ipairs(threads) do longest = math.max(longest, t:get("elapsed") or 0) end
  io.write(string.format('BENCH_JSON {"requests": %d, "duration_us": %d, "elapsed_us": %d, "connect": %d, ' ..
    '"read": %d, "write": %d, "status": %d, "timeout": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, ' ..
    '"max_us": %d}\n', summary.requests, summary.duration, longest, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end

-- Loaded before every target script (bench/wrk.py concatenates them): counts the
-- answers by HTTP status in each thread and prints, at the end, one parseable line
-- per figure. Every target, the baseline included, runs this same Lua per response.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_id", #threads)
end

statuses = {}

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    for code, n in pairs(thread:get("statuses")) do
      total[code] = (total[code] or 0) + n
    end
  end
  local parts = {}
  for code, n in pairs(total) do
    table.insert(parts, string.format('"%d": %d', code, n))
  end
  io.write("BENCH_STATUS {" .. table.concat(parts, ", ") .. "}\n")
  io.write(string.format("BENCH_LATENCY_US p50=%d p90=%d p99=%d max=%d mean=%.1f stdev=%.1f\n",
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean,
    latency.stdev))
  io.write(string.format("BENCH_SUMMARY requests=%d duration_us=%d bytes=%d connect=%d read=%d write=%d status=%d timeout=%d\n",
    summary.requests, summary.duration, summary.bytes, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.status, summary.errors.timeout))
end

-- POST /api/v1/scan/bulk with 100 new e-mail targets each time.
-- args: API key, a tag that keeps the targets of one run apart from other runs', targets per call
local counter = 0

function init(args)
  wrk.headers["Authorization"] = "Bearer " .. args[1]
  wrk.headers["Content-Type"] = "application/json"
  tag = args[2]
  size = tonumber(args[3] or "100")
end

function request()
  counter = counter + 1
  local items = {}
  for k = 1, size do
    items[k] = string.format('{"target": "bulk.%s.%d.%d.%d@example.com", "kind": "email"}', tag, thread_id,
                             counter, k)
  end
  return wrk.format("POST", "/api/v1/scan/bulk", nil, '{"targets": [' .. table.concat(items, ", ") .. ']}')
end

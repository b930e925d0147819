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

-- GET {prefix}{id}, going round a list of ids.
-- args: API key, path prefix (/api/v1/scan/ or /api/v1/scan/bulk/), file of ids (one a line)
local ids, n, i = {}, 0, 0

function init(args)
  wrk.headers["Authorization"] = "Bearer " .. args[1]
  prefix = args[2]
  for line in io.lines(args[3]) do
    if #line > 0 then
      n = n + 1
      ids[n] = line
    end
  end
  i = (thread_id or 0) % n  -- the threads start at different ids
end

function request()
  i = i % n + 1
  return wrk.format("GET", prefix .. ids[i])
end

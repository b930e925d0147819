-- Loaded before every target script (bench/wrk.py concatenates them): counts the
-- answers by HTTP status in each thread and prints, at the end, one parseable line
-- per figure. Every target, the baseline included, runs this same Lua per response.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_id", #threads)
end

statuses = {}

-- The headers of a JSON POST for each API key in a file (one a line): the creation targets'.
function json_post_headers(path)
  local keys = {}
  for line in io.lines(path) do
    if #line > 0 then
      keys[#keys + 1] = {["Authorization"] = "Bearer " .. line, ["Content-Type"] = "application/json"}
    end
  end
  return keys
end

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

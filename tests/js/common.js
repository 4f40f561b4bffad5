'use strict';
// Shared by the ali-ons scripts that tests/test_ali_ons.py runs against `mqlite serve`.
// Each script takes one JSON argument and prints one JSON object per line on stdout.

function config() {
  return JSON.parse(process.argv[2] || '{}');
}

function emit(event, fields) {
  process.stdout.write(JSON.stringify(Object.assign({ event }, fields)) + '\n');
}

// The options every ali-ons client gets: the server's address as the name server (no HTTP
// `onsAddr` look-up; `httpclient` is required by ali-ons but never called when `nameSrv` is set),
// the ACL keys when given, and a logger that counts what the tests look at.
function clientOptions(cfg, counters) {
  const options = {
    nameSrv: cfg.nameSrv,
    httpclient: {
      request() {
        return Promise.reject(new Error('no onsAddr look-up: nameSrv is set'));
      },
    },
    logger: {
      info() {},
      debug(format) {
        // The push consumer logs each message it drops by tag itself: the server should have.
        if (String(format).includes('message filter by tags')) counters.clientFiltered++;
      },
      warn(...args) {
        process.stderr.write('[warn] ' + args.map(String).join(' ') + '\n');
      },
      error(...args) {
        process.stderr.write('[error] ' + args.map(a => (a && a.stack) || String(a)).join(' ') + '\n');
      },
    },
  };
  if (cfg.accessKey) {
    options.accessKeyId = cfg.accessKey;
    options.accessKeySecret = cfg.secretKey;
  }
  return Object.assign(options, cfg.options || {});
}

// ali-ons turns a refused request into a generic error (and retries sends): print each refusal's
// RocketMQ response code as it arrives ({"event":"refused","requestCode":310,"code":16,...}).
function reportRefusals(cfg) {
  const MQClientAPI = require('ali-ons/lib/mq_client_api');
  const defaultHandler = MQClientAPI.prototype._defaultHandler;
  MQClientAPI.prototype._defaultHandler = function(request, response) {
    emit('refused', { requestCode: request.code, code: response.code, remark: response.remark || null });
    if (cfg.stopOnRefusal) process.exit(4);
    return defaultHandler.call(this, request, response);
  };
}

function fail(err, exitCode) {
  emit('error', { name: err.name, code: err.code === undefined ? null : err.code, message: err.message });
  process.exit(exitCode);
}

module.exports = { config, emit, clientOptions, fail, reportRefusals };

'use strict';
// Push-consumes cfg.topic with cfg.expression (tags, or {expressionType: 'SQL92', subString}) in
// cfg.group until every key of cfg.expect has been consumed successfully. Keys in cfg.failFirst make
// the listener throw on their first delivery, so ali-ons sends them back (CONSUMER_SEND_MSG_BACK) and
// they return through %RETRY%<group>.
// Prints {"event":"message",...} per delivery, then {"event":"done","clientFiltered":N} after the
// consumer closed (offsets persisted); {"event":"timeout"} and exit 3 if cfg.timeoutMs passes first;
// with cfg.stopOnRefusal, exit 4 at the first request the server refuses. {"event":"ready"} says the
// consumer has its queues and is pulling. With cfg.untilStdinEnds it consumes until its standard
// input is closed instead (cfg.expect is then only what the timeout reports as missing).
const { Consumer } = require('ali-ons');
const { config, emit, clientOptions, fail, reportRefusals } = require('./common');

async function main() {
  const cfg = config();
  reportRefusals(cfg);
  const counters = { clientFiltered: 0 };
  const expected = new Set(cfg.expect);
  const failFirst = new Set(cfg.failFirst || []);
  const consumer = new Consumer(Object.assign(clientOptions(cfg, counters), {
    consumerGroup: cfg.group,
    consumeFromWhere: cfg.consumeFromWhere || 'CONSUME_FROM_FIRST_OFFSET',
  }));
  let finish;
  const finished = new Promise(resolve => { finish = resolve; });
  consumer.on('error', err => process.stderr.write('[consumer error] ' + err.message + '\n'));
  // Queues assigned by a rebalance, their pulls under way: {"event":"ready"} once, and the queue ids
  // it holds after every change ({"event":"queues","queueIds":[..]}).
  consumer.once(`topic_${cfg.topic}_queue_changed`, () => emit('ready', {}));
  consumer.on(`topic_${cfg.topic}_queue_changed`, () => {
    const held = Array.from(consumer.processQueueTable.values())
      .map(item => item.messageQueue)
      .filter(mq => mq.topic === cfg.topic)
      .map(mq => Number(mq.queueId));
    emit('queues', { queueIds: held.sort((a, b) => a - b) });
  });
  consumer.subscribe(cfg.topic, cfg.expression, async msg => {
    const key = msg.keys;
    const failing = failFirst.delete(key);
    emit('message', {
      key,
      tags: msg.tags,
      topic: msg.topic,
      bodyBase64: msg.body ? msg.body.toString('base64') : '',
      msgId: msg.msgId,
      queueId: msg.queueId,
      queueOffset: msg.queueOffset,
      reconsumeTimes: msg.reconsumeTimes,
      retryTopic: msg.properties.RETRY_TOPIC || null,
      properties: msg.properties,
      failed: failing,
    });
    if (failing) throw new Error(`failing ${key} once on purpose`);
    expected.delete(key);
    // After the consume loop has moved the offset past this message (microtasks), not before:
    // close() persists the offsets it holds at that moment.
    if (expected.size === 0 && !cfg.untilStdinEnds) setImmediate(finish);
  });
  if (cfg.untilStdinEnds) {
    process.stdin.on('end', finish);
    process.stdin.resume();
  }
  const timer = setTimeout(() => {
    emit('timeout', { missing: Array.from(expected) });
    process.exit(3);
  }, cfg.timeoutMs || 60000);
  await finished;
  clearTimeout(timer);
  await consumer.close(); // persists the consume offsets (UPDATE_CONSUMER_OFFSET) and unregisters
  emit('done', { clientFiltered: counters.clientFiltered });
  process.exit(0);
}

main().catch(err => fail(err, 2));

'use strict';
// Sends cfg.messages ([{tags, keys: [..], properties?: {..}, body (UTF-8) | bodyBase64}]) to cfg.topic with an ali-ons
// Producer; prints {"event":"sent",...} per message, then {"event":"done"}; an error ends it with
// {"event":"error","code":<RocketMQ response code or null>,...} and exit status 2.
const { Producer, Message } = require('ali-ons');
const { config, emit, clientOptions, fail, reportRefusals } = require('./common');

async function main() {
  const cfg = config();
  reportRefusals(cfg);
  const counters = { clientFiltered: 0 };
  const producer = new Producer(Object.assign(clientOptions(cfg, counters), { producerGroup: cfg.group }));
  producer.on('error', err => process.stderr.write('[producer error] ' + err.message + '\n'));
  await producer.ready();
  for (const [index, m] of cfg.messages.entries()) {
    const body = m.bodyBase64 !== undefined ? Buffer.from(m.bodyBase64, 'base64') : Buffer.from(m.body, 'utf8');
    const msg = new Message(cfg.topic, m.tags, body);
    if (m.keys) msg.keys = m.keys;
    Object.assign(msg.properties, m.properties || {}); // user properties (SQL92 filters read them)
    const result = await producer.send(msg);
    emit('sent', {
      index,
      msgId: result.msgId,
      sendStatus: result.sendStatus,
      queueId: Number(result.messageQueue.queueId),
      queueOffset: result.queueOffset,
      brokerName: result.messageQueue.brokerName,
    });
  }
  emit('done', {});
  process.exit(0); // ali-ons keeps its inner producer's timers and sockets: leave without closing
}

main().catch(err => fail(err, 2));

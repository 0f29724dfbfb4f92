#!/usr/bin/env node
// End-to-end check of the pulsar-grpc broker from Node.js, straight from the .proto files
// with @grpc/grpc-js and @grpc/proto-loader (no SDK).
//
//   node produce_consume.js <host:port> <topic> [--json-schema] [--lookup]
//       [--encrypt-with PUBLIC_PEM [--key-name NAME]] [--decrypt-with PRIVATE_PEM]
//       [--produce-only | --consume-only]
//   PULSAR_GRPC_AUTH_TOKEN=<jwt> node produce_consume.js <host:port> <topic>
//
// With PULSAR_GRPC_AUTH_TOKEN set, every call carries `authorization: Bearer <token>` (a broker
// with token authentication); unset, no credentials are sent.
//
// 1. subscribes a Shared consumer (initial position Earliest) and grants permits with Flow;
// 2. produces 1000 messages ("msg-0" .. "msg-999") as 10 batches of 100 and checks the 10
//    receipts;
// 3. consumes the 1000 messages (each exactly once, ids matching the receipts), acks them in
//    batches, the last ack with request_id=1, and waits for its AckReceipt (acks durable);
// 4. closes the consumer, subscribes again and checks that nothing is redelivered within 1.5 s.
//
// With --json-schema, the producer declares a JSON schema (x-pulsar-schema-bin: a serialized
// Schema, encoded with protobufjs, the library @grpc/proto-loader loads the .proto with), each
// payload is a JSON object {"seq": n, "text": "msg-n"} that schema describes, and every entry
// delivered must carry the schema version ProducerReady answered (printed as
// "schema_version", hex).
//
// With --lookup, <host:port> is a service address: the topic is looked up there first (Redirects
// followed, as a client does) and every call goes to the address answered. When a PIP-1 proxy
// answered (proxy_through_service_url), that address is the proxy's and each call about the
// topic names the owner broker in x-pulsar-proxy-to-broker-url, as the proxy answered it; the
// summary then has "lookup": {"connected_to", "proxy_through_service_url",
// "proxy_to_broker_url"}.
//
// End-to-end encryption (tests/node/e2ee.js, docs/protocol.md), for checking Node against the
// Python SDK in both directions:
//   --encrypt-with PUBLIC_PEM [--key-name NAME]: every batch is sent encrypted (a
//     CompressedBatch with an EncryptionContext), its data key wrapped for that public key (RSA
//     or EC) under NAME (default "node-key");
//   --decrypt-with PRIVATE_PEM: every entry delivered must be encrypted, and is decrypted with
//     that private key (the summary counts them: "decrypted_entries");
//   --produce-only: only step 2 (another client consumes); --consume-only: only step 3, with
//     no receipts to compare against (another client produced msg-0 .. msg-999).
//
// Prints one JSON line on stdout, {"produced":1000,"consumed":1000,"redelivered":0}, and
// exits 0; on any failure prints the error (stderr, and a JSON line with "error" on stdout)
// and exits 1. Every call has a deadline and the whole run is capped at 60 s.
'use strict';

const fs = require('node:fs');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { BatchDecryptor, BatchEncryptor } = require('./e2ee');
const { PROTOS_DIR, PROTO_FILE, messageType } = require('./proto');

const BATCHES = 10;
const BATCH_SIZE = 100;
const TOTAL = BATCHES * BATCH_SIZE;
const PERMITS = 500; // granted at a time, refilled when half are used
const ACK_CHUNK = 100; // ids per Ack request
const ACK_REQUEST_ID = '1';
const QUIET_MS = 1500; // "nothing comes back": the one deliberately timed wait
const GLOBAL_TIMEOUT_MS = 60_000;
const CALL_DEADLINE_MS = 45_000; // deadline of every gRPC call
const STEP_TIMEOUT_MS = 15_000; // longest wait for any one expected response
const CLOSE_TIMEOUT_MS = 5_000; // wait for the broker to end a half-closed call


const AUTH_TOKEN = process.env.PULSAR_GRPC_AUTH_TOKEN || '';
const JSON_SCHEMA = process.argv.includes('--json-schema');
const LOOKUP = process.argv.includes('--lookup');
const MAX_LOOKUP_REDIRECTS = 5;
const PRODUCE_ONLY = process.argv.includes('--produce-only');
const CONSUME_ONLY = process.argv.includes('--consume-only');

// The value following a flag (undefined when the flag is absent).
function option(name) {
  const at = process.argv.indexOf(name);
  if (at < 0) return undefined;
  const value = process.argv[at + 1];
  check(value !== undefined && !value.startsWith('--'), `${name} needs a value`);
  return value;
}
// Headers every call about the topic carries: the owner broker, when a proxy answered the lookup.
let route = {};
// The JSON schema's definition: an Avro record describing the payloads (as Pulsar's JSON
// schemas are), sent as the Schema's schema_data.
const JSON_SCHEMA_DEFINITION = JSON.stringify({
  type: 'record',
  name: 'Greeting',
  namespace: 'node.example',
  fields: [
    { name: 'seq', type: 'int' },
    { name: 'text', type: 'string' },
  ],
});
const SCHEMA_TYPE_JSON = 2; // pulsargrpc.v1.SchemaType, Pulsar's Schema.Type numbers

const summary = { produced: 0, consumed: 0, redelivered: 0 };
let finished = false;
// Set by main() from --encrypt-with / --decrypt-with.
let encryptor = null;
let decryptor = null;

function finish(code, error) {
  if (finished) return;
  finished = true;
  let line;
  if (error) {
    process.stderr.write(`produce_consume: FAILED: ${describe(error)}\n`);
    if (error && error.stack && !(error instanceof CheckError)) {
      process.stderr.write(`${error.stack}\n`);
    }
    line = JSON.stringify({ ...summary, error: describe(error) });
  } else {
    line = JSON.stringify(summary);
  }
  process.stdout.write(`${line}\n`, () => process.exit(code));
  // In case the write callback never runs.
  setTimeout(() => process.exit(code), 1000).unref();
}

class CheckError extends Error {}

function check(condition, message) {
  if (!condition) throw new CheckError(message);
}

function describe(error) {
  if (!(error instanceof Error)) return String(error);
  if (typeof error.code === 'number' && error.metadata instanceof grpc.Metadata) {
    const codeName = grpc.status[error.code] ?? error.code;
    const pulsarCode = error.metadata.get('pulsar-error-code');
    const pulsar = pulsarCode.length ? ` pulsar-error-code=${pulsarCode[0]}` : '';
    return `gRPC ${codeName}: ${error.details || error.message}${pulsar}`;
  }
  return error.message;
}

function deadline(ms = CALL_DEADLINE_MS) {
  return new Date(Date.now() + ms);
}

// A call's metadata: the given pairs, and the token when there is one. (A plaintext channel
// cannot carry grpc-js call credentials, so the header is set on each call.)
function metadata(pairs) {
  const md = new grpc.Metadata();
  for (const [key, value] of Object.entries({ ...pairs, ...route })) md.set(key, value); // -bin: a Buffer
  if (AUTH_TOKEN) md.set('authorization', `Bearer ${AUTH_TOKEN}`);
  return md;
}

// A bidirectional call whose responses are read one at a time with a timeout.
class Stream {
  constructor(call, name) {
    this.call = call;
    this.name = name;
    this.buffer = [];
    this.waiter = null;
    this.closedWith = null; // Error once the call is over
    this.status = new Promise((resolve) => call.on('status', resolve));
    call.on('data', (msg) => {
      if (this.waiter) this.waiter.resolve(msg);
      else this.buffer.push(msg);
    });
    call.on('error', (err) => this.close(err));
    call.on('end', () => this.close(new Error(`${name}: the broker ended the call`)));
  }

  close(err) {
    if (this.closedWith) return;
    this.closedWith = err;
    if (this.waiter) this.waiter.reject(err);
  }

  // The next response; rejects when the call ends or after timeoutMs (when quiet, resolves
  // null instead of rejecting on timeout).
  next(timeoutMs, what, { quiet = false } = {}) {
    if (this.buffer.length) return Promise.resolve(this.buffer.shift());
    if (this.closedWith) return Promise.reject(this.closedWith);
    check(!this.waiter, `${this.name}: concurrent reads`);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiter = null;
        if (quiet) resolve(null);
        else reject(new CheckError(`${this.name}: no ${what} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiter = {
        resolve: (msg) => {
          clearTimeout(timer);
          this.waiter = null;
          resolve(msg);
        },
        reject: (err) => {
          clearTimeout(timer);
          this.waiter = null;
          reject(err);
        },
      };
    });
  }

  write(request) {
    check(!this.closedWith, `${this.name}: write after the call ended (${describe(this.closedWith)})`);
    this.call.write(request);
  }

  // Half-closes and waits for the broker to finish the call; cancels it if it does not.
  async end() {
    if (!this.closedWith) this.call.end();
    let timer;
    const timeout = new Promise((resolve) => {
      timer = setTimeout(() => resolve(null), CLOSE_TIMEOUT_MS);
    });
    const status = await Promise.race([this.status, timeout]);
    clearTimeout(timer);
    if (status === null) {
      process.stderr.write(`${this.name}: not ended by the broker after half-close; cancelling\n`);
      this.call.cancel();
    } else {
      check(
        status.code === grpc.status.OK || status.code === grpc.status.CANCELLED,
        `${this.name}: ended with ${grpc.status[status.code]}: ${status.details}`,
      );
    }
  }
}

function loadService() {
  const definition = protoLoader.loadSync(PROTO_FILE, {
    includeDirs: [PROTOS_DIR],
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true, // virtual field naming the member of each oneof that is set
  });
  const pkg = grpc.loadPackageDefinition(definition);
  return pkg.pulsargrpc.v1.PulsarService;
}

// The serialized pulsargrpc.v1.Schema declaring the JSON schema: what x-pulsar-schema-bin
// carries.
function jsonSchemaHeader() {
  const Schema = messageType('Schema');
  const schema = {
    name: 'greetings',
    schema_data: Buffer.from(JSON_SCHEMA_DEFINITION),
    type: SCHEMA_TYPE_JSON,
    properties: { 'from': 'produce_consume.js' },
  };
  check(!Schema.verify(schema), `Schema: ${Schema.verify(schema)}`);
  return Buffer.from(Schema.encode(Schema.create(schema)).finish());
}

function payloadOf(n) {
  const text = `msg-${n}`;
  return Buffer.from(JSON_SCHEMA ? JSON.stringify({ seq: n, text }) : text);
}

// The "msg-n" text of a payload (the JSON object's text field with --json-schema).
function textOf(payload) {
  if (!JSON_SCHEMA) return payload;
  const value = JSON.parse(payload);
  check(value.text === `msg-${value.seq}`, `consumer: payload ${payload} is not the schema's`);
  return value.text;
}

function waitForReady(client) {
  return new Promise((resolve, reject) => {
    client.waitForReady(deadline(STEP_TIMEOUT_MS), (err) =>
      err ? reject(new CheckError(`cannot connect: ${err.message}`)) : resolve(),
    );
  });
}

// "my-topic" = persistent://public/default/my-topic, "tenant/ns/topic" = persistent://tenant/ns/topic.
function fullTopicName(topic) {
  if (topic.includes('://')) return topic;
  return topic.split('/').length === 3 ? `persistent://${topic}` : `persistent://public/default/${topic}`;
}

// Look the topic up at the service address, following Redirects: the address to connect to.
async function lookup(PulsarService, serviceAddress, topic) {
  let address = serviceAddress;
  let authoritative = false;
  for (let hop = 0; hop <= MAX_LOOKUP_REDIRECTS; hop++) {
    const client = new PulsarService(address, grpc.credentials.createInsecure());
    const answer = await new Promise((resolve, reject) => {
      client.Lookup({ topic, authoritative }, metadata({}), { deadline: deadline(STEP_TIMEOUT_MS) },
        (err, response) => (err ? reject(err) : resolve(response)));
    });
    client.close();
    check(answer.grpc_url.startsWith('grpc://'), `lookup: no plaintext address in ${JSON.stringify(answer)}`);
    address = answer.grpc_url.slice('grpc://'.length);
    if (answer.response === 'Connect') {
      if (answer.proxy_through_service_url) {
        route = { 'x-pulsar-proxy-to-broker-url': answer.proxy_to_broker_url };
      }
      summary.lookup = {
        connected_to: address,
        proxy_through_service_url: answer.proxy_through_service_url,
        proxy_to_broker_url: answer.proxy_to_broker_url,
      };
      return address;
    }
    authoritative = answer.authoritative;
  }
  throw new CheckError(`lookup: more than ${MAX_LOOKUP_REDIRECTS} redirects`);
}

async function subscribe(client, topic, subscription, name) {
  const md = metadata({
    'x-pulsar-topic': topic,
    'x-pulsar-subscription': subscription,
    'x-pulsar-subscription-type': 'Shared',
    'x-pulsar-initial-position': 'Earliest',
  });
  const stream = new Stream(client.Consume(md, { deadline: deadline() }), name);
  const first = await stream.next(STEP_TIMEOUT_MS, 'ConsumerSubscribed');
  check(first.response === 'subscribed', `${name}: first response is ${first.response}, not subscribed`);
  check(
    first.subscribed.subscription === subscription,
    `${name}: subscribed to ${JSON.stringify(first.subscribed.subscription)}, not ${subscription}`,
  );
  return stream;
}

// An entry's messages: decrypted when it is encrypted (which --decrypt-with requires).
function entryMessages(entry) {
  const encrypted = Boolean(entry.compressed && entry.compressed.encryption);
  const where = `entry ${entry.ledger_id}:${entry.entry_id}`;
  if (decryptor === null) {
    check(!encrypted, `consumer: ${where} is encrypted and no --decrypt-with key was given`);
    return entry.messages;
  }
  check(encrypted, `consumer: ${where} is not encrypted`);
  const plain = decryptor.decrypt(entry.compressed);
  check(
    plain.length === entry.compressed.uncompressed_size,
    `consumer: ${where} decrypts to ${plain.length} bytes, not uncompressed_size ${entry.compressed.uncompressed_size}`,
  );
  const { messages } = messageType('ProduceRequest').decode(plain);
  check(
    messages.length === entry.compressed.num_messages,
    `consumer: ${where} holds ${messages.length} messages, not num_messages ${entry.compressed.num_messages}`,
  );
  summary.decrypted_entries = (summary.decrypted_entries ?? 0) + 1;
  return messages;
}

// Messages of a MessageBatch not acked already, as {id, payload}.
function* deliveredMessages(batch) {
  for (const entry of batch.entries) {
    const acked = new Set(entry.acked_batch_indexes.map(Number));
    const messages = entryMessages(entry);
    for (let index = 0; index < messages.length; index++) {
      if (acked.has(index)) continue;
      yield {
        id: {
          ledger_id: entry.ledger_id,
          entry_id: entry.entry_id,
          batch_index: index,
          partition: entry.partition,
        },
        payload: textOf(Buffer.from(messages[index].payload).toString('utf8')),
        schemaVersion: Buffer.from(entry.schema_version).toString('hex'),
      };
    }
  }
}

async function produce(client, topic) {
  const pairs = { 'x-pulsar-topic': topic };
  if (JSON_SCHEMA) pairs['x-pulsar-schema-bin'] = jsonSchemaHeader();
  const md = metadata(pairs);
  const stream = new Stream(client.Produce(md, { deadline: deadline() }), 'producer');
  const first = await stream.next(STEP_TIMEOUT_MS, 'ProducerReady');
  check(first.response === 'ready', `producer: first response is ${first.response}, not ready`);
  const schemaVersion = Buffer.from(first.ready.schema_version).toString('hex');
  if (JSON_SCHEMA) {
    check(schemaVersion.length === 16, `producer: schema version ${schemaVersion} is not 8 bytes`);
    summary.schema_version = schemaVersion;
  }
  check(
    first.ready.topic === fullTopicName(topic),
    `producer: ready for topic ${JSON.stringify(first.ready.topic)}, not ${fullTopicName(topic)}`,
  );
  // Sequence ids continue after the producer's last stored one (0 or the uint64 -1 sentinel
  // for a new producer): message n gets base + n.
  const last = BigInt(first.ready.last_sequence_id);
  const base = last >= 1n << 63n ? 0n : last + 1n;

  const expected = [];
  for (let b = 0; b < BATCHES; b++) {
    const messages = [];
    for (let i = 0; i < BATCH_SIZE; i++) {
      messages.push({ payload: payloadOf(b * BATCH_SIZE + i) });
    }
    const sequenceId = base + BigInt(b * BATCH_SIZE);
    expected.push(sequenceId.toString());
    if (encryptor === null) {
      stream.write({ sequence_id: sequenceId.toString(), messages });
    } else {
      const ProduceRequest = messageType('ProduceRequest');
      const plain = Buffer.from(ProduceRequest.encode(ProduceRequest.create({ messages })).finish());
      const compressed = encryptor.encrypt(plain, messages.length);
      stream.write({ sequence_id: sequenceId.toString(), compressed });
    }
  }

  const receipts = new Map(); // "ledger:entry" -> first message number of the batch
  for (let b = 0; b < BATCHES; b++) {
    const msg = await stream.next(STEP_TIMEOUT_MS, `receipt ${b + 1}/${BATCHES}`);
    check(msg.response === 'receipt', `producer: got ${msg.response}, not a receipt`);
    const r = msg.receipt;
    check(r.sequence_id === expected[b], `producer: receipt ${b} for sequence id ${r.sequence_id}, expected ${expected[b]}`);
    check(!r.duplicate, `producer: batch ${b} (sequence id ${r.sequence_id}) dropped as a duplicate`);
    check(r.batch_size === BATCH_SIZE, `producer: receipt ${b} has batch_size ${r.batch_size}`);
    const key = `${r.ledger_id}:${r.entry_id}`;
    check(!receipts.has(key), `producer: two receipts for entry ${key}`);
    receipts.set(key, b * BATCH_SIZE);
    summary.produced += r.batch_size;
  }
  await stream.end();
  return receipts;
}

async function consumeAll(stream, seen) {
  let outstanding = PERMITS; // permits granted and not used yet
  stream.write({ flow: { permits: PERMITS } });
  let pending = [];
  const flush = (requestId) => {
    while (pending.length) {
      const ids = pending.splice(0, ACK_CHUNK);
      const ack = { type: 'Individual', ids };
      if (requestId && pending.length === 0) ack.request_id = requestId;
      stream.write({ ack });
    }
  };

  while (seen.size < TOTAL) {
    const msg = await stream.next(STEP_TIMEOUT_MS, `messages (have ${seen.size}/${TOTAL})`);
    if (msg.response !== 'messages') continue; // e.g. active_consumer_change
    for (const { id, payload, schemaVersion } of deliveredMessages(msg.messages)) {
      if (JSON_SCHEMA) {
        check(
          schemaVersion === summary.schema_version,
          `consumer: ${payload} carries schema version ${schemaVersion}, not ${summary.schema_version}`,
        );
      }
      const match = /^msg-(\d+)$/.exec(payload);
      check(match && Number(match[1]) < TOTAL, `consumer: unexpected payload ${JSON.stringify(payload)}`);
      const n = Number(match[1]);
      check(!seen.has(n), `consumer: ${payload} delivered twice`);
      seen.set(n, id);
      summary.consumed += 1;
      outstanding -= 1;
      pending.push(id);
    }
    if (seen.size < TOTAL) {
      if (pending.length >= ACK_CHUNK) flush(null);
      if (outstanding <= PERMITS / 2) {
        stream.write({ flow: { permits: PERMITS - outstanding } });
        outstanding = PERMITS;
      }
    }
  }
  // The last ack asks for a receipt: once it arrives every ack on this stream is durable.
  flush(ACK_REQUEST_ID);
  for (;;) {
    const msg = await stream.next(STEP_TIMEOUT_MS, 'AckReceipt');
    if (msg.response === 'ack_receipt') {
      check(msg.ack_receipt.request_id === ACK_REQUEST_ID, `consumer: AckReceipt for request ${msg.ack_receipt.request_id}`);
      break;
    }
    if (msg.response === 'messages') {
      const extra = [...deliveredMessages(msg.messages)].map((m) => m.payload);
      check(extra.length === 0, `consumer: delivered again before the ack receipt: ${extra.slice(0, 5).join(', ')}`);
    }
  }
}

async function main() {
  const [serviceAddress, topic] = process.argv.slice(2);
  if (!serviceAddress || !topic) {
    throw new CheckError('usage: node produce_consume.js <host:port> <topic>');
  }
  const publicPem = option('--encrypt-with');
  if (publicPem !== undefined) {
    const name = option('--key-name') ?? 'node-key';
    encryptor = new BatchEncryptor([{ name, publicPem: fs.readFileSync(publicPem) }]);
  }
  const privatePem = option('--decrypt-with');
  if (privatePem !== undefined) decryptor = new BatchDecryptor(fs.readFileSync(privatePem));
  const PulsarService = loadService();
  const address = LOOKUP ? await lookup(PulsarService, serviceAddress, topic) : serviceAddress;
  const client = new PulsarService(address, grpc.credentials.createInsecure());
  await waitForReady(client);
  const subscription = `node-sub-${process.pid}-${Date.now()}`;
  if (PRODUCE_ONLY) {
    await produce(client, topic);
  } else if (CONSUME_ONLY) {
    const consumer = await subscribe(client, topic, subscription, 'consumer');
    await consumeAll(consumer, new Map());
    await consumer.end();
  } else {
    await produceAndConsume(client, topic, subscription);
  }
  client.close();
}

// Steps 1 to 4 of the header.
async function produceAndConsume(client, topic, subscription) {

  const consumer = await subscribe(client, topic, subscription, 'consumer');
  const seen = new Map(); // message number -> MessageId it was delivered with
  const [receipts] = await Promise.all([produce(client, topic), consumeAll(consumer, seen)]);

  // Every message came with the id of the entry its receipt names, at its batch index.
  for (const [n, id] of seen) {
    const key = `${id.ledger_id}:${id.entry_id}`;
    check(receipts.has(key), `consumer: msg-${n} delivered from entry ${key}, which no receipt names`);
    check(
      receipts.get(key) + id.batch_index === n,
      `consumer: msg-${n} delivered as ${key} index ${id.batch_index}`,
    );
  }
  await consumer.end();

  // A new consumer on the subscription must get nothing: everything was acked.
  const again = await subscribe(client, topic, subscription, 'second consumer');
  again.write({ flow: { permits: TOTAL } });
  const quietUntil = Date.now() + QUIET_MS;
  const redelivered = [];
  for (;;) {
    const left = quietUntil - Date.now();
    if (left <= 0) break;
    const msg = await again.next(left, 'message', { quiet: true });
    if (msg === null) break;
    if (msg.response !== 'messages') continue;
    for (const { payload } of deliveredMessages(msg.messages)) redelivered.push(payload);
  }
  summary.redelivered = redelivered.length;
  check(
    redelivered.length === 0,
    `second consumer: ${redelivered.length} acked messages came back (${redelivered.slice(0, 5).join(', ')})`,
  );
  await again.end();
}

setTimeout(
  () => finish(1, new CheckError(`timed out after ${GLOBAL_TIMEOUT_MS / 1000} s`)),
  GLOBAL_TIMEOUT_MS,
);
main().then(
  () => finish(0, null),
  (err) => finish(1, err),
);

#!/usr/bin/env node
// Checks tests/node/e2ee.js against docs/protocol.md's end-to-end encryption test vector.
//
//   node e2ee_vector.js < vector.json
//
// stdin: the vector as JSON, {"data key": hex, "nonce": hex, ...} (tests/unit/test_e2ee_vector.py
// reads it from the document; tests/e2e/test_node_encryption.py hands it over), and
// "keys": the directory of tests/data/e2ee. Prints one JSON line: each check's name -> true or
// the reason it failed; exits 0 when all hold.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { BatchDecryptor, seal, unwrapDataKey, wrapDataKey } = require('./e2ee');
const { messageType } = require('./proto');

function main() {
  const input = JSON.parse(fs.readFileSync(0, 'utf8'));
  const v = Object.fromEntries(
    Object.entries(input).filter(([name]) => name !== 'keys').map(([name, hex]) => [name, Buffer.from(hex, 'hex')]),
  );
  const key = (file) => fs.readFileSync(path.join(input.keys, file));
  const ProduceRequest = messageType('ProduceRequest');
  const results = {};
  const check = (name, fn) => {
    try {
      results[name] = fn() === true ? true : 'does not match';
    } catch (err) {
      results[name] = err.message;
    }
  };

  check('aes-gcm messages', () => seal(v['data key'], v.plaintext, v.nonce).sealed.equals(v.messages));
  check('ecies wrapping', () =>
    wrapDataKey(key('ec_public.pem'), v['data key'], { ephemeral: v['ecies ephemeral'], nonce: v['ecies nonce'] })
      .equals(v['ec wrapped key']));
  check('ec unwrap', () => unwrapDataKey(key('ec_private.pem'), v['ec wrapped key']).equals(v['data key']));
  check('rsa unwrap', () => unwrapDataKey(key('rsa_private.pem'), v['rsa wrapped key']).equals(v['data key']));
  check('produce request decrypts', () => {
    const request = ProduceRequest.toObject(ProduceRequest.decode(v['produce request']), {
      enums: String,
      bytes: Buffer,
      defaults: true,
    });
    const plain = new BatchDecryptor(key('ec_private.pem')).decrypt(request.compressed);
    const { messages } = ProduceRequest.decode(plain);
    const texts = messages.map((m) => `${m.key}:${Buffer.from(m.payload).toString()}`);
    return plain.equals(v.plaintext) && texts.join(',') === 'user-1:hello,user-1:world';
  });
  check('produce request encodes', () => {
    // Only the fields that are set: protobufjs writes a field given as 0 (a conforming encoder
    // leaves proto3 defaults out).
    const compressed = {
      uncompressed_size: v.plaintext.length,
      num_messages: 2,
      key: Buffer.from('user-1'),
      messages: v.messages,
      encryption: {
        keys: [{ key: 'ec', value: v['ec wrapped key'] }],
        algorithm: 'AES-256-GCM',
        param: v.nonce,
      },
    };
    const bytes = Buffer.from(ProduceRequest.encode(ProduceRequest.fromObject({ compressed })).finish());
    return bytes.equals(v['produce request']);
  });
  process.stdout.write(`${JSON.stringify(results)}\n`);
  process.exitCode = Object.values(results).every((r) => r === true) ? 0 : 1;
}

main();

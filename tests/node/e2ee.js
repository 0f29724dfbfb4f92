// End-to-end encryption of pulsar-grpc batches in Node.js, per docs/protocol.md (issue 14's
// spec), with nothing but the crypto module: a second, independent implementation of what the
// Python SDK does, so that the tests can check each reads the other's messages.
//
// - The payload: the batch's messages serialized as a ProduceRequest holding only field 13,
//   sealed with AES-256-GCM under a 32-byte data key and a fresh 12-byte nonce per batch
//   (EncryptionContext.param), no AAD, the 16-byte tag appended.
// - The data key, wrapped for each named public key: RSA keys with RSA-OAEP (SHA-1, MGF1
//   SHA-1, no label: Pulsar's "RSA/NONE/OAEPWithSHA1AndMGF1Padding"); EC keys with the
//   documented ECIES: an ephemeral key pair on the recipient's curve, ECDH, HKDF-SHA256
//   (empty salt, info "pulsar-grpc ecies v1", 32 bytes), then AES-256-GCM of the data key;
//   value = ephemeral point (uncompressed SEC1) || nonce || ciphertext || tag.
'use strict';

const crypto = require('node:crypto');

const ALGORITHM = 'AES-256-GCM';
const DATA_KEY_BYTES = 32;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const ECIES_INFO = Buffer.from('pulsar-grpc ecies v1');

function seal(key, plaintext, nonce = crypto.randomBytes(NONCE_BYTES)) {
  const cipher = crypto.createCipheriv('aes-256-gcm', key, nonce);
  const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return { nonce, sealed: Buffer.concat([body, cipher.getAuthTag()]) };
}

function open(key, nonce, sealed) {
  if (sealed.length < TAG_BYTES) throw new Error(`ciphertext of ${sealed.length} bytes has no tag`);
  const decipher = crypto.createDecipheriv('aes-256-gcm', key, nonce);
  decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
  return Buffer.concat([decipher.update(sealed.subarray(0, sealed.length - TAG_BYTES)), decipher.final()]);
}

// An EC key's curve (OpenSSL's name, which createECDH takes) and its field size in bytes
// (the length of each coordinate of its points: the JWK's x is padded to it).
function curveOf(key) {
  const jwk = key.export({ format: 'jwk' });
  return { curve: key.asymmetricKeyDetails.namedCurve, jwk, size: Buffer.from(jwk.x, 'base64url').length };
}

function kek(shared) {
  return Buffer.from(crypto.hkdfSync('sha256', shared, Buffer.alloc(0), ECIES_INFO, DATA_KEY_BYTES));
}

// The data key wrapped for one public key (PEM: SubjectPublicKeyInfo, or PKCS#1 for RSA).
// `fixed` ({ ephemeral, nonce }: the ECIES ephemeral private scalar and nonce) makes an EC
// wrapping deterministic, for reproducing docs/protocol.md's test vector; never otherwise.
function wrapDataKey(publicPem, dataKey, fixed = null) {
  const key = crypto.createPublicKey(publicPem);
  if (key.asymmetricKeyType === 'rsa') {
    return crypto.publicEncrypt(
      { key, padding: crypto.constants.RSA_PKCS1_OAEP_PADDING, oaepHash: 'sha1' },
      dataKey,
    );
  }
  if (key.asymmetricKeyType !== 'ec') throw new Error(`unsupported key type ${key.asymmetricKeyType}`);
  const { curve, jwk, size } = curveOf(key);
  const recipient = Buffer.concat([
    Buffer.from([4]),
    Buffer.from(jwk.x, 'base64url'),
    Buffer.from(jwk.y, 'base64url'),
  ]);
  const ephemeral = crypto.createECDH(curve);
  if (fixed) ephemeral.setPrivateKey(fixed.ephemeral);
  else ephemeral.generateKeys();
  const point = ephemeral.getPublicKey(); // uncompressed SEC1, 1 + 2 * size bytes
  if (point.length !== 1 + 2 * size) throw new Error(`ephemeral point of ${point.length} bytes`);
  const shared = ephemeral.computeSecret(recipient);
  const { nonce, sealed } = fixed ? seal(kek(shared), dataKey, fixed.nonce) : seal(kek(shared), dataKey);
  return Buffer.concat([point, nonce, sealed]);
}

// The data key a wrapped value holds, unwrapped with a private key (PEM: PKCS#8, PKCS#1 or
// SEC1, as openssl writes them); throws when this key does not unwrap it.
function unwrapDataKey(privatePem, wrapped) {
  const key = crypto.createPrivateKey(privatePem);
  if (key.asymmetricKeyType === 'rsa') {
    return crypto.privateDecrypt(
      { key, padding: crypto.constants.RSA_PKCS1_OAEP_PADDING, oaepHash: 'sha1' },
      wrapped,
    );
  }
  if (key.asymmetricKeyType !== 'ec') throw new Error(`unsupported key type ${key.asymmetricKeyType}`);
  const { curve, jwk, size } = curveOf(key);
  const pointBytes = 1 + 2 * size;
  if (wrapped.length !== pointBytes + NONCE_BYTES + DATA_KEY_BYTES + TAG_BYTES) {
    throw new Error(`a wrapped key for ${curve} has ${pointBytes + NONCE_BYTES + DATA_KEY_BYTES + TAG_BYTES} bytes, not ${wrapped.length}`);
  }
  const ecdh = crypto.createECDH(curve);
  ecdh.setPrivateKey(Buffer.from(jwk.d, 'base64url'));
  const shared = ecdh.computeSecret(wrapped.subarray(0, pointBytes));
  const nonce = wrapped.subarray(pointBytes, pointBytes + NONCE_BYTES);
  return open(kek(shared), nonce, wrapped.subarray(pointBytes + NONCE_BYTES));
}

// A producer's side: one data key for its life (the tests' runs are far shorter than the
// 4-hour rotation), wrapped once for each named public key.
class BatchEncryptor {
  // keys: [{ name, publicPem, metadata }]
  constructor(keys) {
    if (!keys.length) throw new Error('no encryption key');
    this.dataKey = crypto.randomBytes(DATA_KEY_BYTES);
    this.keys = keys.map(({ name, publicPem, metadata = {} }) => ({
      key: name,
      value: wrapDataKey(publicPem, this.dataKey),
      metadata,
    }));
  }

  // The CompressedBatch fields for a serialized ProduceRequest holding only field 13.
  encrypt(serializedMessages, numMessages, routingKey = Buffer.alloc(0)) {
    const { nonce, sealed } = seal(this.dataKey, serializedMessages);
    return {
      compression: 'NONE',
      uncompressed_size: serializedMessages.length,
      num_messages: numMessages,
      key: routingKey,
      messages: sealed,
      encryption: { keys: this.keys, algorithm: ALGORITHM, param: nonce },
    };
  }
}

// A consumer's side: a private key per key name (or one for every name), data keys cached by
// their wrapped bytes so each batch costs one AES-GCM, not one RSA or ECDH operation.
class BatchDecryptor {
  constructor(privatePem) {
    this.privatePem = privatePem;
    this.cache = new Map(); // wrapped value (hex) -> data key
  }

  dataKey(context) {
    const errors = [];
    for (const { key, value } of context.keys) {
      const id = Buffer.from(value).toString('hex');
      const cached = this.cache.get(id);
      if (cached) return cached;
      try {
        const dataKey = unwrapDataKey(this.privatePem, Buffer.from(value));
        this.cache.set(id, dataKey);
        return dataKey;
      } catch (err) {
        errors.push(`${key}: ${err.message}`);
      }
    }
    throw new Error(`no key unwraps the batch's data key (${errors.join('; ') || 'no keys'})`);
  }

  // The serialized ProduceRequest (field 13 only) an encrypted CompressedBatch holds; NONE and
  // ZLIB compression are undone here (the codecs Node has built in).
  decrypt(compressed) {
    const context = compressed.encryption;
    if (context.algorithm !== ALGORITHM) throw new Error(`unsupported algorithm ${context.algorithm}`);
    const plain = open(this.dataKey(context), Buffer.from(context.param), Buffer.from(compressed.messages));
    if (compressed.compression === 'NONE') return plain;
    if (compressed.compression === 'ZLIB') return require('node:zlib').inflateSync(plain);
    throw new Error(`compression ${compressed.compression} is not supported by this test client`);
  }
}

module.exports = { ALGORITHM, BatchDecryptor, BatchEncryptor, seal, unwrapDataKey, wrapDataKey };

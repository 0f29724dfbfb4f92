// The .proto's message types with protobufjs, for the bytes the gRPC library does not make (a
// serialized Schema header, an encrypted batch's plaintext, a test vector's ProduceRequest).
// protobufjs is the copy @grpc/proto-loader itself uses (a dependency of it).
'use strict';

const path = require('node:path');

const PROTOS_DIR = path.resolve(__dirname, '..', '..', 'protos');
const PROTO_FILE = 'pulsargrpc/v1/pulsar.proto';

let root = null;

function messageType(name) {
  if (root === null) {
    const protobuf = require(
      require.resolve('protobufjs', { paths: [require.resolve('@grpc/proto-loader')] }),
    );
    root = new protobuf.Root();
    root.resolvePath = (_origin, target) => path.join(PROTOS_DIR, target);
    root.loadSync(PROTO_FILE, { keepCase: true });
  }
  return root.lookupType(`pulsargrpc.v1.${name}`);
}

module.exports = { PROTOS_DIR, PROTO_FILE, messageType };

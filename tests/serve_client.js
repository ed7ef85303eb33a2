#!/usr/bin/env node
// An independent client of ps_serve in Node.js, with nothing but Node's own
// http2 module: gRPC's framing and the protobuf wire format of
// proto/serving.proto's PredictRequest and PredictResponse written out here
// (no generated code, no npm package).
//
//     serve_client.js ADDRESS LINES_FILE COUNT
//
// Sends the first COUNT lines of LINES_FILE in one Predict and prints the
// model version, a line of the model's task names, then per line each
// task's probability, tab-separated (%.9g, as serve_client.py). Exits 1 on
// a gRPC error, printing its status and message.
'use strict';
const fs = require('fs');
const http2 = require('http2');

// --- protobuf wire format --------------------------------------------------
function varint(value) {
  const bytes = [];
  while (value > 127) {
    bytes.push((value & 127) | 128);
    value = Math.floor(value / 128);
  }
  bytes.push(value);
  return Buffer.from(bytes);
}

// PredictRequest { repeated string lines = 1; }
function encodeRequest(lines) {
  const parts = [];
  for (const line of lines) {
    const text = Buffer.from(line, 'utf8');
    parts.push(Buffer.from([(1 << 3) | 2]), varint(text.length), text);
  }
  return Buffer.concat(parts);
}

// Reads the fields of `buffer`: calls visit(number, wireType, value), value
// a Buffer for length-delimited fields, a Number for varints.
function readFields(buffer, visit) {
  let at = 0;
  const readVarint = () => {
    let value = 0;
    let scale = 1;
    for (;;) {
      const byte = buffer[at++];
      value += (byte & 127) * scale;
      if (byte < 128) return value;
      scale *= 128;
    }
  };
  while (at < buffer.length) {
    const key = readVarint();
    const number = Math.floor(key / 8);
    const wireType = key & 7;
    if (wireType === 0) {
      visit(number, wireType, readVarint());
    } else if (wireType === 2) {
      const length = readVarint();
      visit(number, wireType, buffer.subarray(at, at + length));
      at += length;
    } else if (wireType === 5) {
      visit(number, wireType, buffer.subarray(at, at + 4));
      at += 4;
    } else if (wireType === 1) {
      at += 8;
    } else {
      throw new Error('unexpected wire type ' + wireType);
    }
  }
}

// repeated float: packed (wire type 2) or one at a time (wire type 5).
function floats(wireType, value, into) {
  if (wireType === 5) {
    into.push(value.readFloatLE(0));
    return;
  }
  for (let i = 0; i + 4 <= value.length; i += 4) into.push(value.readFloatLE(i));
}

// PredictResponse { repeated float probabilities = 1; string model_version =
// 2; int64 model_cut = 3; repeated TaskProbabilities tasks = 4; }
// TaskProbabilities { string task = 1; repeated float probabilities = 2; }
function decodeResponse(buffer) {
  const response = {probabilities: [], version: '', tasks: []};
  readFields(buffer, (number, wireType, value) => {
    if (number === 1) floats(wireType, value, response.probabilities);
    if (number === 2) response.version = value.toString('utf8');
    if (number === 4) {
      const task = {name: '', probabilities: []};
      readFields(value, (n, w, v) => {
        if (n === 1) task.name = v.toString('utf8');
        if (n === 2) floats(w, v, task.probabilities);
      });
      response.tasks.push(task);
    }
  });
  return response;
}

// %.9g, as C's printf and Python's "%.9g" write a float.
function nineDigits(value) {
  if (value === 0) return '0';
  let text = value.toPrecision(9);
  if (text.includes('e')) {
    let [mantissa, exponent] = text.split('e');
    if (mantissa.includes('.')) mantissa = mantissa.replace(/\.?0+$/, '');
    const sign = exponent[0] === '-' ? '-' : '+';
    exponent = exponent.replace(/^[+-]/, '').padStart(2, '0');
    return mantissa + 'e' + sign + exponent;
  }
  return text.includes('.') ? text.replace(/\.?0+$/, '') : text;
}

function main(address, linesFile, count) {
  const lines = fs.readFileSync(linesFile, 'utf8').split('\n')
      .filter((line) => line.length > 0).slice(0, Number(count));
  const message = encodeRequest(lines);
  // gRPC's frame: not compressed, the length (big-endian), the message.
  const frame = Buffer.alloc(5);
  frame.writeUInt32BE(message.length, 1);
  const session = http2.connect('http://' + address);
  session.on('error', (error) => {
    console.error('connection: ' + error.message);
    process.exit(1);
  });
  const stream = session.request({
    ':method': 'POST',
    ':path': '/ps.Serving/Predict',
    'content-type': 'application/grpc',
    'te': 'trailers',
  });
  const chunks = [];
  let status = null;
  let statusMessage = '';
  const readStatus = (headers) => {
    if (headers['grpc-status'] !== undefined) {
      status = Number(headers['grpc-status']);
      statusMessage = decodeURIComponent(headers['grpc-message'] || '');
    }
  };
  stream.on('response', readStatus);
  stream.on('trailers', readStatus);
  stream.on('data', (chunk) => chunks.push(chunk));
  stream.on('end', () => {
    session.close();
    if (status !== 0) {
      console.error('grpc status ' + status + ': ' + statusMessage);
      process.exit(1);
    }
    const body = Buffer.concat(chunks);
    const response = decodeResponse(body.subarray(5, 5 + body.readUInt32BE(1)));
    const out = [response.version,
      response.tasks.map((task) => task.name).join('\t')];
    for (let i = 0; i < lines.length; ++i) {
      out.push(response.tasks
          .map((task) => nineDigits(task.probabilities[i])).join('\t'));
    }
    process.stdout.write(out.join('\n') + '\n');
  });
  stream.end(Buffer.concat([frame, message]));
}

main(...process.argv.slice(2));

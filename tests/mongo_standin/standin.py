#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""tests/mongo_standin/standin.py — a MongoDB wire server for shoal's tests.

No MongoDB server can be installed on the development machines, so the MongoDB code of
store/ runs in every `make test` against this stand-in: Debian's python3-mockupdb (MongoDB
Inc.'s wire-protocol test server: sockets, one thread per connection, OP_MSG and OP_QUERY
parsing) for the protocol, python3-mongomock (collections, the query language, update
operators, unique indexes, aggregation) for the data, and here the mapping of each command
libmongoc 1.23 and shoal send onto mongomock, with the server's replies and error codes:

  hello / isMaster, ping, buildInfo, endSessions, listDatabases, listCollections, create,
  drop, dropDatabase, insert, update, delete, find (real cursors: getMore, killCursors),
  count, distinct, aggregate, findAndModify, createIndexes, listIndexes, dropIndexes, and
  configureFailPoint failCommand (closeConnection, errorCode, writeConcernError, errorLabels;
  times / skip / alwaysOn / off) to make the next writes fail.

Errors: 11000 duplicate key (writeErrors with keyPattern / keyValue), 26 namespace not
found, 43 cursor not found, 59 unknown command, 48 namespace exists, 27 index not found,
85 / 86 index conflicts, 238 not supported by the stand-in.

Two fixes to mongomock: $inc keeps int64 fields int64 (mongomock writes back an int, which
BSON-encodes as int32: shoal's counters and sequence numbers are int64), and a duplicate key
names its index, key pattern and value as the server does.

With --replset NAME it answers hello as the primary of a one-member replica set, so
libmongoc sends retryable writes (lsid + txnNumber) as it does against a production
deployment; a write retried with a txnNumber already executed returns the first reply and
is not applied twice.

What it cannot show: write concern and replication, failover, auth, TLS, compression,
transactions, server-side limits and speed (commands are executed one at a time, in memory).

Run with Debian's interpreter (/usr/bin/python3: a python3 earlier on PATH may not see the
Debian packages):

  /usr/bin/python3 tests/mongo_standin/standin.py --port 0 --replset shoal
      prints "PORT <n>" once listening; stops on SIGTERM / SIGINT
  ... --port-file F --pid-file P --parent-pid PID --background --log L
      writes the port (and pid) to files, exits when process PID is gone, and with
      --background returns once listening, leaving the server running
  ... --verbose
      prints every command (connection, database, command, collection) to the log
"""

import argparse
import collections
import datetime
import errno
import os
import signal
import socket
import struct
import sys
import time
import traceback

import bson
from bson import Int64, ObjectId, SON
from bson.raw_bson import RawBSONDocument
from bson.timestamp import Timestamp

import mockupdb
import mongomock
import mongomock.collection
from mongomock import filtering, helpers

MAX_BSON = 16 * 1024 * 1024
MAX_MESSAGE = 48000000
MAX_WRITE_BATCH = 100000
MAX_WIRE = 13  # MongoDB 5.0
FIRST_BATCH = 101
CURSOR_IDLE_S = 600.0
OP_REPLY, OP_MSG = 1, 2013
MORE_TO_COME = 1 << 1

CODE_NAMES = {
    1: 'InternalError', 2: 'BadValue', 9: 'FailedToParse', 11: 'UserNotFound',
    20: 'IllegalOperation', 26: 'NamespaceNotFound', 27: 'IndexNotFound',
    43: 'CursorNotFound', 48: 'NamespaceExists', 59: 'CommandNotFound',
    72: 'InvalidOptions', 85: 'IndexOptionsConflict', 86: 'IndexKeySpecsConflict',
    91: 'ShutdownInProgress', 100: 'UnsatisfiableWriteConcern', 189: 'PrimarySteppedDown',
    238: 'NotImplemented', 262: 'ExceededTimeLimit', 10107: 'NotWritablePrimary',
    11000: 'DuplicateKey', 11600: 'InterruptedAtShutdown', 11602: 'InterruptedDueToReplStateChange',
    13435: 'NotPrimaryNoSecondaryOk', 13436: 'NotPrimaryOrSecondary', 64: 'WriteConcernFailed',
    6: 'HostUnreachable', 7: 'HostNotFound', 89: 'NetworkTimeout', 9001: 'SocketException',
    50: 'MaxTimeMSExpired',
}
# Codes after which a server labels a retryable write "RetryableWriteError" (wire >= 9
# drivers rely on the label, not on the code).
RETRYABLE_CODES = {6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436}
WRITE_COMMANDS = {'insert', 'update', 'delete', 'findandmodify'}


class CommandError(Exception):
    def __init__(self, code, msg, **extra):
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.extra = extra


# ---- mongomock fixes -------------------------------------------------------------------

def _inc_updater(doc, field_name, value):
    """$inc as the server does it: int64 stays int64 (mongomock writes back an int, which
    BSON-encodes as int32 when it fits: shoal's counters and sequence numbers are int64)."""
    def add(old, inc):
        r = old + inc
        if isinstance(r, float):
            return r
        if isinstance(old, Int64) or isinstance(inc, Int64):
            return Int64(r)
        return r
    if isinstance(doc, dict):
        doc[field_name] = add(doc.get(field_name, 0), value)
    elif isinstance(doc, list):
        i = int(field_name)
        if i < 0:
            raise mongomock.WriteError('Negative index provided')
        if i < len(doc):
            doc[i] = add(doc[i], value)
        else:
            doc += [None] * (i - len(doc) + 1)
            doc[i] = value


mongomock.collection._updaters['$inc'] = _inc_updater


class DupKey(mongomock.DuplicateKeyError):
    def __init__(self, ns, index, pattern, values):
        shown = ', '.join('%s: %s' % (k, _show(v)) for k, v in values)
        msg = 'E11000 duplicate key error collection: %s index: %s dup key: { %s }' % (
            ns, index, shown)
        super().__init__(msg, 11000)
        self.key_pattern = SON(pattern)
        self.key_value = SON(values)


def _show(v):
    if isinstance(v, str):
        return '"%s"' % v
    if isinstance(v, bytes):
        return 'BinData(0, %s)' % v[:16].hex()
    if v is None:
        return 'null'
    return repr(v)


def _index_value(doc, key):
    try:
        return helpers.get_value_by_dot(doc, key)
    except (KeyError, TypeError):
        return None


def _ensure_uniques(self, new_data):
    """Unique indexes (also sparse and partial), with the index and key of a duplicate.
    new_data is already in the store: a second document with its key is a duplicate."""
    for name, index in list(self._store.indexes.items()):
        if not index.get('unique'):
            continue
        keys = [k for k, _ in index['key']]
        values = [_index_value(new_data, k) for k in keys]
        if index.get('sparse') and all(v is None for v in values):
            continue
        pfe = index.get('partialFilterExpression')
        if pfe is not None and not filtering.filter_applies(pfe, new_data):
            continue
        seen = 0
        for doc in self._store._documents.values():
            if all(_index_value(doc, k) == v for k, v in zip(keys, values)) and (
                    pfe is None or filtering.filter_applies(pfe, doc)):
                seen += 1
                if seen > 1:
                    raise DupKey(self.full_name, name, index['key'], list(zip(keys, values)))


mongomock.collection.Collection._ensure_uniques = _ensure_uniques


# ---- mockupdb: whole messages without quadratic copying ---------------------------------

def _receive(sock, length):
    buf = bytearray(length)
    view = memoryview(buf)
    got = 0
    while got < length:
        n = sock.recv_into(view[got:], length - got)
        if n == 0:
            raise socket.error(errno.ECONNRESET, 'closed')
        got += n
    return bytes(buf)


mockupdb.mock_server_receive = _receive


def _doc_bytes(doc):
    return bson.encode(doc)


# ---- the server -------------------------------------------------------------------------

class Cursor(object):
    __slots__ = ('id', 'ns', 'it', 'pending', 'used')

    def __init__(self, cid, ns, it):
        self.id, self.ns, self.it, self.pending, self.used = cid, ns, it, None, time.time()


class StandIn(object):
    def __init__(self, replset=None, verbose=False):
        self.client = mongomock.MongoClient()
        self.replset = replset
        self.verbose = verbose
        self.host = '127.0.0.1:0'
        self.started = datetime.datetime.utcnow()
        self.cursors = {}
        self.next_conn = 1
        self.conns = {}  # socket id -> (connection id, appname)
        self.failpoint = None
        self.retries = collections.OrderedDict()  # (lsid, txnNumber) -> reply
        self.counts = collections.Counter()
        self.election = ObjectId('7fffffff0000000000000001')
        self.reply_id = 0

    # -- replies --
    def _send(self, request, doc):
        self.reply_id += 1
        body = _doc_bytes(doc)
        if isinstance(request, mockupdb.OpMsg):
            data = struct.pack('<IB', 0, 0) + body
            header = struct.pack('<iiii', 16 + len(data), self.reply_id, request.request_id, OP_MSG)
        else:  # OP_QUERY command: OP_REPLY
            data = struct.pack('<iqii', 0, 0, 0, 1) + body
            header = struct.pack('<iiii', 16 + len(data), self.reply_id, request.request_id,
                                 OP_REPLY)
        request._client.sendall(header + data)

    @staticmethod
    def error(code, msg, **extra):
        d = SON([('ok', 0.0), ('errmsg', msg), ('code', code),
                 ('codeName', CODE_NAMES.get(code, 'Error%d' % code))])
        d.update(extra)
        return d

    # -- entry point: every request of every connection, one at a time --
    def handle(self, request):
        try:
            self._handle(request)
        except (socket.error, OSError):
            pass
        except Exception:  # never leave a client waiting for a reply
            traceback.print_exc()
            try:
                self._send(request, self.error(1, 'stand-in: %s' % traceback.format_exc(limit=1)
                                               .strip().splitlines()[-1]))
            except Exception:
                pass
        return True

    def _handle(self, request):
        if not isinstance(request, (mockupdb.OpMsg, mockupdb.Command)):
            # Legacy opcodes (OP_QUERY on a collection, OP_GET_MORE, OP_INSERT...): no
            # server answering maxWireVersion 13 accepts them.
            request.hangup()
            return
        cmd = request.doc
        name = next(iter(cmd), '')
        lname = name.lower()
        db = cmd.get('$db') if isinstance(request, mockupdb.OpMsg) else request.namespace
        db = db or 'admin'
        self.counts[lname] += 1
        sock = request._client
        if id(sock) not in self.conns or (lname in ('hello', 'ismaster') and 'client' in cmd):
            # A new connection (its handshake carries the client's metadata): a socket's id
            # may be that of a closed one, so its state starts afresh here.
            self.conns[id(sock)] = [self.next_conn, '']
            self.next_conn += 1
        conn = self.conns[id(sock)]
        if self.verbose:
            print('%d %s.%s %s' % (conn[0], db, name, _brief(cmd.get(name))), file=sys.stderr,
                  flush=True)
        if lname in ('hello', 'ismaster') and 'client' in cmd:
            conn[1] = (cmd['client'].get('application') or {}).get('name') or ''
        # failCommand: before the command runs, as in the server.
        fp, add_wce = self.failpoint, None
        if fp is not None and lname in fp['commands'] and (
                not fp['app'] or fp['app'] == conn[1]):
            if fp['skip'] > 0:
                fp['skip'] -= 1
                fp = None
            elif fp['times'] is not None:
                fp['times'] -= 1
                if fp['times'] <= 0:
                    self.failpoint = None
        else:
            fp = None
        if fp is not None:
            if fp['close']:
                request.hangup()
                return
            if fp['code'] is not None:
                labels = fp['labels']
                if labels is None:
                    labels = (['RetryableWriteError'] if fp['code'] in RETRYABLE_CODES and
                              'txnNumber' in cmd else [])
                extra = {'errorLabels': labels} if labels else {}
                self._reply(request, self.error(fp['code'], "Failing command via 'failCommand' "
                                                "failpoint", **extra))
                return
            add_wce = fp['wce']
        # A retried write (same session and txnNumber): the first reply, not run twice.
        key = None
        if lname in WRITE_COMMANDS and 'txnNumber' in cmd and 'lsid' in cmd:
            key = (bytes(_doc_bytes(cmd['lsid'])), int(cmd['txnNumber']), lname)
            if key in self.retries:
                self._reply(request, self.retries[key])
                return
        try:
            reply = self.dispatch(lname, name, db, cmd)
        except CommandError as e:
            reply = self.error(e.code, e.msg, **e.extra)
        except mongomock.DuplicateKeyError as e:
            reply = self.dup_error(e, command=True)
        except NotImplementedError as e:
            reply = self.error(238, 'not supported by the MongoDB stand-in: %s' % e)
        except (mongomock.OperationFailure, mongomock.WriteError) as e:
            code = getattr(e, 'code', None) or 2
            reply = self.error(code, str(e))
        except mongomock.CollectionInvalid as e:
            reply = self.error(48, str(e))
        if key is not None and reply.get('ok'):
            self.retries[key] = reply
            while len(self.retries) > 10000:
                self.retries.popitem(last=False)
        if add_wce and reply.get('ok'):
            reply['writeConcernError'] = add_wce
        self._reply(request, reply)

    def _reply(self, request, reply):
        if isinstance(request, mockupdb.OpMsg) and request.flags & MORE_TO_COME:
            return  # unacknowledged write: no reply
        if 'ok' not in reply:
            reply['ok'] = 1.0
        self._send(request, reply)

    def dispatch(self, lname, name, db, cmd):
        fn = COMMANDS.get(lname)
        if fn is None:
            raise CommandError(59, "no such command: '%s'" % name)
        return fn(self, db, cmd, cmd[name])

    # -- helpers --
    def coll(self, db, name):
        if not isinstance(name, str) or not name or '$' in name or '\0' in name:
            raise CommandError(73, 'Invalid namespace specified %r' % (name,))
        return self.client[db][name]

    def exists(self, db, name):
        return name in self.client[db].list_collection_names()

    def dup_error(self, e, command=False, index=None):
        pattern = getattr(e, 'key_pattern', None)
        value = getattr(e, 'key_value', None)
        extra = {}
        if pattern is not None:
            extra = {'keyPattern': pattern, 'keyValue': value}
        if command:
            return self.error(11000, str(e), **extra)
        d = SON([('index', index), ('code', 11000)])
        d.update(extra)
        d['errmsg'] = str(e)
        return d

    def open_cursor(self, ns, it, cmd, first_key='firstBatch', batch_size=None,
                    single=False, limit_first=None):
        c = Cursor(0, ns, it)
        n = FIRST_BATCH if batch_size is None else batch_size
        batch = self.take(c, n)
        exhausted = c.pending is None and self._exhausted(c)
        if single or exhausted:
            cid = 0
        else:
            cid = self._new_cursor_id()
            c.id = cid
            self.cursors[cid] = c
        self._expire_cursors()
        return SON([('cursor', SON([(first_key, batch), ('id', Int64(cid)), ('ns', ns)])),
                    ('ok', 1.0)])

    def _new_cursor_id(self):
        while True:
            cid = int.from_bytes(os.urandom(8), 'little') & 0x7fffffffffffffff
            if cid and cid not in self.cursors:
                return cid

    @staticmethod
    def _exhausted(c):
        try:
            c.pending = next(c.it)
            return False
        except StopIteration:
            return True

    @staticmethod
    def take(c, n):
        """Up to n documents (None: as many as fit), at most 16 MB together (at least one)."""
        out, size = [], 0
        while n is None or len(out) < n:
            if c.pending is not None:
                d, c.pending = c.pending, None
            else:
                try:
                    d = next(c.it)
                except StopIteration:
                    break
            raw = d if isinstance(d, RawBSONDocument) else RawBSONDocument(_doc_bytes(d))
            if out and size + len(raw.raw) > MAX_BSON - 64 * 1024:
                c.pending = raw
                break
            out.append(raw)
            size += len(raw.raw)
        return out

    def _expire_cursors(self):
        now = time.time()
        for cid in [k for k, c in self.cursors.items() if now - c.used > CURSOR_IDLE_S]:
            del self.cursors[cid]

    def hello(self, db, cmd, arg, legacy):
        now = datetime.datetime.utcnow()
        d = SON([('helloOk', True)])
        if legacy:
            d['ismaster'] = True
        else:
            d['isWritablePrimary'] = True
        d['secondary'] = False
        if self.replset:
            ts = Timestamp(int(time.time()), 1)
            op = SON([('ts', ts), ('t', Int64(1))])
            d.update([('setName', self.replset), ('setVersion', 1), ('hosts', [self.host]),
                      ('primary', self.host), ('me', self.host), ('electionId', self.election),
                      ('lastWrite', SON([('opTime', op), ('lastWriteDate', now),
                                         ('majorityOpTime', op), ('majorityWriteDate', now)]))])
        d.update([('maxBsonObjectSize', MAX_BSON), ('maxMessageSizeBytes', MAX_MESSAGE),
                  ('maxWriteBatchSize', MAX_WRITE_BATCH), ('localTime', now),
                  ('logicalSessionTimeoutMinutes', 30), ('minWireVersion', 0),
                  ('maxWireVersion', MAX_WIRE), ('readOnly', False), ('ok', 1.0)])
        # No topologyVersion: libmongoc would switch to the streaming (awaitable) hello,
        # which this server does not do.
        return d


def _brief(v):
    s = repr(v)
    return s if len(s) < 80 else s[:77] + '...'


def _sort_list(sort):
    if not sort:
        return None
    return [(k, v) for k, v in sort.items()]


def _int(v, dflt=0):
    if v is None:
        return dflt
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return int(v)
    raise CommandError(2, 'expected a number, got %r' % (v,))


def _is_operator_update(u):
    return isinstance(u, dict) and bool(u) and next(iter(u)).startswith('$')


# ---- commands ------------------------------------------------------------------------------

def c_hello(s, db, cmd, arg):
    return s.hello(db, cmd, arg, legacy=False)


def c_ismaster(s, db, cmd, arg):
    return s.hello(db, cmd, arg, legacy=True)


def c_ping(s, db, cmd, arg):
    return SON([('ok', 1.0)])


def c_buildinfo(s, db, cmd, arg):
    return SON([('version', '5.0.0'), ('gitVersion', 'shoal-mongo-standin'),
                ('versionArray', [5, 0, 0, 0]), ('bits', 64), ('debug', False),
                ('maxBsonObjectSize', MAX_BSON), ('storageEngines', ['mongomock']),
                ('ok', 1.0)])


def c_ok(s, db, cmd, arg):
    return SON([('ok', 1.0)])


def c_listdatabases(s, db, cmd, arg):
    dbs = []
    for name in sorted(s.client.list_database_names()):
        if not s.client[name].list_collection_names():
            continue
        dbs.append(SON([('name', name), ('sizeOnDisk', 0), ('empty', False)]))
    f = cmd.get('filter')
    if f:
        dbs = [d for d in dbs if filtering.filter_applies(f, d)]
    if cmd.get('nameOnly'):
        dbs = [SON([('name', d['name'])]) for d in dbs]
    return SON([('databases', dbs), ('totalSize', 0), ('ok', 1.0)])


def c_listcollections(s, db, cmd, arg):
    infos = []
    for name in sorted(s.client[db].list_collection_names()):
        info = SON([('name', name), ('type', 'collection'), ('options', SON()),
                    ('info', SON([('readOnly', False)])),
                    ('idIndex', SON([('v', 2), ('key', SON([('_id', 1)])), ('name', '_id_')]))])
        infos.append(info)
    f = cmd.get('filter')
    if f:
        infos = [i for i in infos if filtering.filter_applies(f, i)]
    if cmd.get('nameOnly'):
        infos = [SON([('name', i['name']), ('type', 'collection')]) for i in infos]
    bs = (cmd.get('cursor') or {}).get('batchSize')
    return s.open_cursor('%s.$cmd.listCollections' % db, iter(infos), cmd,
                         batch_size=None if bs is None else _int(bs))


def c_create(s, db, cmd, arg):
    if s.exists(db, arg):
        raise CommandError(48, 'Collection %s.%s already exists.' % (db, arg))
    s.coll(db, arg)
    s.client[db].create_collection(arg)
    return SON([('ok', 1.0)])


def c_drop(s, db, cmd, arg):
    if not s.exists(db, arg):
        raise CommandError(26, 'ns not found')
    n = len(s.client[db][arg].index_information())
    s.client[db].drop_collection(arg)
    return SON([('nIndexesWas', n), ('ns', '%s.%s' % (db, arg)), ('ok', 1.0)])


def c_dropdatabase(s, db, cmd, arg):
    s.client.drop_database(db)
    for cid in [k for k, c in s.cursors.items() if c.ns.split('.', 1)[0] == db]:
        del s.cursors[cid]
    return SON([('dropped', db), ('ok', 1.0)])


def c_insert(s, db, cmd, arg):
    coll = s.coll(db, arg)
    docs = cmd.get('documents') or []
    ordered = cmd.get('ordered', True)
    n, errors = 0, []
    for i, d in enumerate(docs):
        if '_id' not in d:
            d2 = SON([('_id', ObjectId())])
            d2.update(d)
            d = d2
        try:
            coll.insert_one(d)
            n += 1
        except mongomock.DuplicateKeyError as e:
            errors.append(s.dup_error(e, index=i))
        except (mongomock.WriteError, mongomock.OperationFailure) as e:
            errors.append(SON([('index', i), ('code', getattr(e, 'code', None) or 2),
                               ('errmsg', str(e))]))
        if errors and ordered:
            break
    r = SON([('n', n)])
    if errors:
        r['writeErrors'] = errors
    return r


def c_update(s, db, cmd, arg):
    coll = s.coll(db, arg)
    ordered = cmd.get('ordered', True)
    n = modified = 0
    upserted, errors = [], []
    for i, u in enumerate(cmd.get('updates') or []):
        q, upd = u.get('q', {}), u.get('u')
        upsert, multi = bool(u.get('upsert')), bool(u.get('multi'))
        af = u.get('arrayFilters')
        try:
            if isinstance(upd, list):
                raise NotImplementedError('pipeline updates')
            if _is_operator_update(upd):
                if multi:
                    r = coll.update_many(q, upd, upsert=upsert, array_filters=af)
                else:
                    r = coll.update_one(q, upd, upsert=upsert, array_filters=af)
            else:
                if multi:
                    raise CommandError(9, 'multi update is not supported for replacement-style '
                                          'update')
                r = coll.replace_one(q, upd or {}, upsert=upsert)
            if r.upserted_id is not None:
                n += 1
                upserted.append(SON([('index', i), ('_id', r.upserted_id)]))
            else:
                n += r.matched_count
                modified += r.modified_count
        except mongomock.DuplicateKeyError as e:
            errors.append(s.dup_error(e, index=i))
        except CommandError as e:
            errors.append(SON([('index', i), ('code', e.code), ('errmsg', e.msg)]))
        except NotImplementedError as e:
            errors.append(SON([('index', i), ('code', 238),
                               ('errmsg', 'not supported by the MongoDB stand-in: %s' % e)]))
        except (mongomock.WriteError, mongomock.OperationFailure) as e:
            errors.append(SON([('index', i), ('code', getattr(e, 'code', None) or 2),
                               ('errmsg', str(e))]))
        if errors and ordered:
            break
    r = SON([('n', n), ('nModified', modified)])
    if upserted:
        r['upserted'] = upserted
    if errors:
        r['writeErrors'] = errors
    return r


def c_delete(s, db, cmd, arg):
    coll = s.coll(db, arg)
    n = 0
    for d in cmd.get('deletes') or []:
        q = d.get('q', {})
        if _int(d.get('limit', 0)) == 1:
            n += coll.delete_one(q).deleted_count
        else:
            n += coll.delete_many(q).deleted_count
    return SON([('n', n)])


def c_find(s, db, cmd, arg):
    coll = s.coll(db, arg)
    limit = _int(cmd.get('limit'))
    single = bool(cmd.get('singleBatch'))
    if limit < 0:
        limit, single = -limit, True
    skip = _int(cmd.get('skip'))
    if skip < 0 or limit < 0:
        raise CommandError(2, 'skip and limit must be >= 0')
    proj = cmd.get('projection') or None
    it = iter(coll.find(cmd.get('filter') or {}, projection=proj, skip=skip, limit=limit,
                        sort=_sort_list(cmd.get('sort'))))
    bs = cmd.get('batchSize')
    bs = None if bs is None else _int(bs)
    return s.open_cursor('%s.%s' % (db, arg), it, cmd, batch_size=bs, single=single)


def c_getmore(s, db, cmd, arg):
    cid = _int(arg)
    ns = '%s.%s' % (db, cmd.get('collection'))
    c = s.cursors.get(cid)
    if c is None or c.ns != ns:
        raise CommandError(43, 'cursor id %d not found' % cid)
    c.used = time.time()
    batch = s.take(c, _int(cmd.get('batchSize'), 0) or None)
    if c.pending is None and s._exhausted(c):
        del s.cursors[cid]
        cid = 0
    return SON([('cursor', SON([('nextBatch', batch), ('id', Int64(cid)), ('ns', ns)])),
                ('ok', 1.0)])


def c_killcursors(s, db, cmd, arg):
    killed, missing = [], []
    for cid in cmd.get('cursors') or []:
        if s.cursors.pop(int(cid), None) is not None:
            killed.append(Int64(cid))
        else:
            missing.append(Int64(cid))
    return SON([('cursorsKilled', killed), ('cursorsNotFound', missing), ('cursorsAlive', []),
                ('cursorsUnknown', []), ('ok', 1.0)])


def c_count(s, db, cmd, arg):
    coll = s.coll(db, arg)
    kw = {}
    if _int(cmd.get('skip')):
        kw['skip'] = _int(cmd.get('skip'))
    if _int(cmd.get('limit')):
        kw['limit'] = abs(_int(cmd.get('limit')))
    n = coll.count_documents(cmd.get('query') or {}, **kw)
    return SON([('n', n), ('ok', 1.0)])


def c_distinct(s, db, cmd, arg):
    coll = s.coll(db, arg)
    return SON([('values', coll.distinct(cmd.get('key'), cmd.get('query') or {})), ('ok', 1.0)])


def c_aggregate(s, db, cmd, arg):
    if not isinstance(arg, str):
        raise NotImplementedError('database-level aggregate')
    if 'cursor' not in cmd and not cmd.get('explain'):
        raise CommandError(9, "The 'cursor' option is required, except for aggregate with the "
                              "explain argument")
    pipeline = cmd.get('pipeline') or []
    for st in pipeline:
        if any(k in ('$out', '$merge') for k in st):
            raise NotImplementedError('$out / $merge')
    coll = s.coll(db, arg)
    docs = list(coll.aggregate(pipeline))
    bs = (cmd.get('cursor') or {}).get('batchSize')
    return s.open_cursor('%s.%s' % (db, arg), iter(docs), cmd,
                         batch_size=None if bs is None else _int(bs))


def c_findandmodify(s, db, cmd, arg):
    coll = s.coll(db, arg)
    query = cmd.get('query') or {}
    sort = _sort_list(cmd.get('sort'))
    remove = bool(cmd.get('remove'))
    update = cmd.get('update')
    new = bool(cmd.get('new'))
    upsert = bool(cmd.get('upsert'))
    fields = cmd.get('fields') or None
    if remove and (update is not None or new or upsert):
        raise CommandError(9, 'Cannot specify both an update and remove=true')
    if not remove and update is None:
        raise CommandError(9, 'Either an update or remove=true must be specified')
    if isinstance(update, list):
        raise NotImplementedError('pipeline updates')
    found = list(coll.find(query, sort=sort, limit=1))
    old = found[0] if found else None
    leo = SON([('n', 0)])
    value = None
    if remove:
        if old is not None:
            coll.delete_one({'_id': old['_id']})
            leo['n'] = 1
            value = _project(coll, old, fields)
    else:
        if old is not None:
            sel = {'_id': old['_id']}
            if _is_operator_update(update):
                coll.update_one(sel, update)
            else:
                coll.replace_one(sel, update)
            leo['n'] = 1
            leo['updatedExisting'] = True
            value = _project(coll, coll.find_one(sel) if new else old, fields)
        elif upsert:
            if _is_operator_update(update):
                r = coll.update_one(query, update, upsert=True)
            else:
                r = coll.replace_one(query, update, upsert=True)
            leo['n'] = 1
            leo['updatedExisting'] = False
            leo['upserted'] = r.upserted_id
            if new:
                value = _project(coll, coll.find_one({'_id': r.upserted_id}), fields)
        else:
            leo['updatedExisting'] = False
    return SON([('lastErrorObject', leo), ('value', value), ('ok', 1.0)])


def _project(coll, doc, fields):
    if doc is None or not fields:
        return doc
    return coll._copy_only_fields(doc, fields, dict)


def _index_doc(name, info):
    d = SON([('v', 2), ('key', SON(info['key'])), ('name', name)])
    for k in ('unique', 'sparse', 'partialFilterExpression', 'expireAfterSeconds'):
        if k in info:
            d[k] = info[k]
    return d


def c_createindexes(s, db, cmd, arg):
    coll = s.coll(db, arg)
    created = not s.exists(db, arg)
    if created:
        s.client[db].create_collection(arg)
    before = len(coll.index_information())
    for spec in cmd.get('indexes') or []:
        key = spec.get('key')
        name = spec.get('name')
        if not key or not name:
            raise CommandError(9, 'an index needs a key and a name')
        keys = [(k, v) for k, v in key.items()]
        existing = coll.index_information()
        if name in existing:
            info = existing[name]
            same = (list(info['key']) == keys and bool(info.get('unique')) ==
                    bool(spec.get('unique')) and bool(info.get('sparse')) ==
                    bool(spec.get('sparse')) and info.get('partialFilterExpression') ==
                    spec.get('partialFilterExpression'))
            if same:
                continue
            raise CommandError(86, 'An existing index has the same name as the requested index. '
                                   'Requested index: %s, existing index: %s' % (
                                       dict(spec), dict(_index_doc(name, info))))
        for other, info in existing.items():
            if list(info['key']) == keys and info.get('partialFilterExpression') == \
                    spec.get('partialFilterExpression'):
                raise CommandError(85, 'Index already exists with a different name: %s' % other)
        kw = {'name': name}
        for k in ('unique', 'sparse'):
            if spec.get(k):
                kw[k] = True
        if spec.get('partialFilterExpression') is not None:
            kw['partialFilterExpression'] = spec['partialFilterExpression']
        if spec.get('expireAfterSeconds') is not None:
            kw['expireAfterSeconds'] = spec['expireAfterSeconds']
        try:
            coll.create_index(keys, **kw)
        except mongomock.DuplicateKeyError:
            raise CommandError(11000, 'E11000 duplicate key error collection: %s.%s index: %s '
                                      '(the collection holds duplicates)' % (db, arg, name))
    after = len(coll.index_information())
    r = SON([('numIndexesBefore', before), ('numIndexesAfter', after),
             ('createdCollectionAutomatically', created)])
    if after == before:
        r['note'] = 'all indexes already exist'
    r['ok'] = 1.0
    return r


def c_listindexes(s, db, cmd, arg):
    if not s.exists(db, arg):
        raise CommandError(26, 'ns does not exist: %s.%s' % (db, arg))
    coll = s.coll(db, arg)
    docs = [_index_doc(n, i) for n, i in coll.index_information().items()]
    bs = (cmd.get('cursor') or {}).get('batchSize')
    return s.open_cursor('%s.%s' % (db, arg), iter(docs), cmd,
                         batch_size=None if bs is None else _int(bs))


def c_dropindexes(s, db, cmd, arg):
    if not s.exists(db, arg):
        raise CommandError(26, 'ns not found %s.%s' % (db, arg))
    coll = s.coll(db, arg)
    existing = coll.index_information()
    which = cmd.get('index')
    names = []
    if which == '*':
        names = [n for n in existing if n != '_id_']
    elif isinstance(which, str):
        names = [which]
    elif isinstance(which, list):
        names = list(which)
    elif isinstance(which, dict):
        keys = list(which.items())
        names = [n for n, i in existing.items() if list(i['key']) == keys]
        if not names:
            raise CommandError(27, "can't find index with key: %s" % dict(which))
    for n in names:
        if n == '_id_':
            raise CommandError(72, 'cannot drop _id index')
        if n not in existing:
            raise CommandError(27, 'index not found with name [%s]' % n)
        coll.drop_index(n)
    return SON([('nIndexesWas', len(existing)), ('ok', 1.0)])


def c_configurefailpoint(s, db, cmd, arg):
    if db != 'admin':
        raise CommandError(13, 'configureFailPoint may only be run against the admin database.')
    if arg != 'failCommand':
        raise NotImplementedError('fail point %r (only failCommand)' % (arg,))
    mode = cmd.get('mode')
    data = cmd.get('data') or {}
    if mode == 'off':
        s.failpoint = None
        return SON([('count', 0), ('ok', 1.0)])
    times = skip = None
    if mode == 'alwaysOn':
        pass
    elif isinstance(mode, dict) and 'times' in mode:
        times = _int(mode['times'])
    elif isinstance(mode, dict) and 'skip' in mode:
        skip = _int(mode['skip'])
    else:
        raise CommandError(2, 'mode must be off, alwaysOn, {times: n} or {skip: n}')
    cmds = data.get('failCommands') or []
    if not cmds:
        raise CommandError(2, 'failCommand needs data.failCommands')
    close = bool(data.get('closeConnection'))
    code = data.get('errorCode')
    wce = data.get('writeConcernError')
    if not close and code is None and wce is None:
        raise CommandError(2, 'failCommand needs closeConnection, errorCode or '
                              'writeConcernError')
    if times == 0:
        s.failpoint = None
    else:
        s.failpoint = {'commands': {c.lower() for c in cmds}, 'close': close,
                       'code': None if code is None else _int(code),
                       'labels': data.get('errorLabels'), 'wce': wce,
                       'app': data.get('appName'), 'times': times, 'skip': skip or 0}
        if close or code is not None:
            s.failpoint['wce'] = None
    return SON([('count', 0), ('ok', 1.0)])


def c_transactions(s, db, cmd, arg):
    raise NotImplementedError('transactions')


COMMANDS = {
    'hello': c_hello, 'ismaster': c_ismaster, 'ping': c_ping, 'buildinfo': c_buildinfo,
    'endsessions': c_ok, 'killallsessions': c_ok, 'listdatabases': c_listdatabases,
    'listcollections': c_listcollections, 'create': c_create, 'drop': c_drop,
    'dropdatabase': c_dropdatabase, 'insert': c_insert, 'update': c_update, 'delete': c_delete,
    'find': c_find, 'getmore': c_getmore, 'killcursors': c_killcursors, 'count': c_count,
    'distinct': c_distinct, 'aggregate': c_aggregate, 'findandmodify': c_findandmodify,
    'createindexes': c_createindexes, 'listindexes': c_listindexes,
    'dropindexes': c_dropindexes, 'deleteindexes': c_dropindexes,
    'configurefailpoint': c_configurefailpoint, 'committransaction': c_transactions,
    'aborttransaction': c_transactions,
}


# ---- process ------------------------------------------------------------------------------

def peak_rss_mb():
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return -1.0


def alive(pid):
    """Whether process pid runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except (OSError, IndexError):
        return True


def write_atomic(path, text):
    tmp = '%s.tmp%d' % (path, os.getpid())
    with open(tmp, 'w') as f:
        f.write(text)
    os.rename(tmp, path)


def main():
    ap = argparse.ArgumentParser(description='A MongoDB wire server for tests (mockupdb + '
                                             'mongomock).')
    ap.add_argument('--port', type=int, default=0, help='TCP port on 127.0.0.1 (0: a free one)')
    ap.add_argument('--port-file', help='write the port here once listening')
    ap.add_argument('--pid-file', help='write the server pid here once listening')
    ap.add_argument('--replset', metavar='NAME',
                    help='answer hello as the primary of the one-member replica set NAME')
    ap.add_argument('--parent-pid', type=int,
                    help='exit when this process is gone (e.g. ctest)')
    ap.add_argument('--background', action='store_true',
                    help='return once listening, leaving the server running')
    ap.add_argument('--log', help='stdout and stderr of the server (with --background)')
    ap.add_argument('--verbose', action='store_true', help='print every command')
    a = ap.parse_args()

    ready_w = None
    if a.background:
        r, w = os.pipe()
        pid = os.fork()
        if pid:
            os.close(w)
            line = b''
            with os.fdopen(r, 'rb') as f:
                line = f.readline()
            if not line.startswith(b'PORT '):
                print('standin: the server did not start (see %s)' % (a.log or 'its output'),
                      file=sys.stderr)
                return 1
            sys.stdout.write(line.decode())
            return 0
        os.close(r)
        os.setsid()
        ready_w = w
        nul = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nul, 0)
        out = os.open(a.log or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        sys.stdout = os.fdopen(1, 'w', buffering=1)
        sys.stderr = os.fdopen(2, 'w', buffering=1)

    standin = StandIn(replset=a.replset, verbose=a.verbose)
    server = mockupdb.MockupDB(port=a.port, request_timeout=int(1e6))
    server._address = ('127.0.0.1', a.port)
    server.autoresponds(standin.handle)
    port = server.run()
    standin.host = '127.0.0.1:%d' % port
    started = time.time()

    def stop(signum=None, frame=None):
        names = ' '.join('%s=%d' % kv for kv in sorted(standin.counts.items()))
        print('standin: stopping after %.1f s (%s); peak RSS %.1f MB; commands: %s' % (
            time.time() - started, 'signal %d' % signum if signum else 'parent gone',
            peak_rss_mb(), names), flush=True)
        for p in (a.port_file, a.pid_file):
            if p:
                try:
                    os.unlink(p)
                except OSError:
                    pass
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if a.pid_file:
        write_atomic(a.pid_file, '%d\n' % os.getpid())
    if a.port_file:
        write_atomic(a.port_file, '%d\n' % port)
    print('standin: listening on %s%s (pid %d)' % (
        standin.host, ', replica set %s' % a.replset if a.replset else '', os.getpid()),
        flush=True)
    print('PORT %d' % port, flush=True)
    if ready_w is not None:
        os.write(ready_w, b'PORT %d\n' % port)
        os.close(ready_w)
    while True:
        time.sleep(0.5)
        if a.parent_pid and not alive(a.parent_pid):
            stop()


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""gen-protocol.py OUTDIR DEF... - makes both sides of the scripts' protocol from lua/protocol/NAME.def.

Each .def file is one script's table (lua/protocol/README.md has the format): the arguments it
takes after the common ones, the constants both sides name, and the fields of its reply. From
them, into OUTDIR:
  protocol.h             the C names: argument indices, the constants' enums, each reply's fields
  protocol_fields.inc    each reply's field table, read by script_protocol.c's one reader
  keys_table.h           the keys of a semaphore (keys.def): DBT_K_*, their names' suffixes
  lua/<script>.lua       the Lua locals: the arguments by name (ARG), the constants, and reply(),
                         which builds the reply from its fields by name (the one positional list)
Files are rewritten only when they change, so that make does not rebuild what did not.
"""
import os
import re
import sys

# A reply field's type: how the C reader checks it and what it stores (protocol_fields.inc).
FIELD_TYPES = {
    'int': ('DBT_FT_INT', 'long long'),  # an integer
    'str': ('DBT_FT_STR', 'const char *'),  # a string
    'str?': ('DBT_FT_STR_NIL', 'const char *'),  # a string, or false (nil): NULL
    'int?': ('DBT_FT_INT_NIL', 'long long'),  # an integer, or false (nil): 0
    'num': ('DBT_FT_NUM', 'long long'),  # an integer, a number's text, or nil (0)
    'ids': ('DBT_FT_IDS', 'dbt_reply_ids'),  # an array of strings
    'int[kinds]': ('DBT_FT_INT_K', 'long long'),  # one integer per kind
    'str?[kinds]': ('DBT_FT_STR_NIL_K', 'const char *'),  # one string or nil per kind
    'array': ('DBT_FT_ARRAY', 'const redisReply *'),  # an array, read by hand
    'any': ('DBT_FT_ANY', 'const redisReply *'),  # anything, read by hand
}
ARG_TYPES = ('str', 'int', 'bool', 'text')


class DefError(Exception):
    pass


def parse(path):
    """One .def file: {name, args, enums, reply} (see lua/protocol/README.md)."""
    d = {'name': None, 'args': [], 'enums': [], 'replies': [], 'groups': [], 'keys': [],
         'kinds': [], 'path': path}
    enum = None
    older = False
    with open(path, encoding='utf-8') as f:
        for no, raw in enumerate(f, 1):
            # words (a quoted Lua string is one, spaces and all), then a comment
            words, comment = [], ''
            for tok in re.findall(r"(?:[^\s'#]+|'[^']*')+|#.*", raw.rstrip('\n')):
                if tok.startswith('#'):
                    comment = tok[1:].strip()
                    break
                words.append(tok)
            if not words:
                continue

            def opts(ws):
                o = {}
                for w in ws:
                    if '=' not in w:
                        raise DefError('%s:%d: "%s" is not KEY=VALUE' % (path, no, w))
                    k, v = w.split('=', 1)
                    o[k] = v
                return o

            kw = words[0]
            if kw != 'value':
                enum = None
            if kw == 'script':
                d['name'] = words[1]
            elif kw == 'arg':
                if len(words) < 3 or words[2] not in ARG_TYPES:
                    raise DefError('%s:%d: arg NAME TYPE (%s)' % (path, no, ', '.join(ARG_TYPES)))
                a = {'name': words[1], 'type': words[2], 'comment': comment, **opts(words[3:])}
                # after a group line, the arguments are its members
                (d['groups'][-1]['members'] if d['groups'] else d['args']).append(a)
            elif kw == 'key':
                if len(words) < 3:
                    raise DefError('%s:%d: key C_NAME SUFFIX lua=NAME' % (path, no))
                k = {'c': words[1], 'suffix': words[2], 'comment': comment, **opts(words[3:])}
                if 'lua' not in k:
                    raise DefError('%s:%d: key %s needs lua=' % (path, no, words[1]))
                if k.get('sent', 'yes') not in ('yes', 'no'):
                    raise DefError('%s:%d: key %s: sent=yes or sent=no' % (path, no, words[1]))
                if k.get('sent', 'yes') == 'yes' and any(x.get('sent') == 'no' for x in d['keys']):
                    raise DefError('%s:%d: key %s: the sent=no keys come last' % (path, no, words[1]))
                d['keys'].append(k)
            elif kw == 'kind':
                if len(words) != 4 or len(words[2]) != 1:
                    raise DefError('%s:%d: kind C_NAME LETTER WORD' % (path, no))
                d['kinds'].append({'c': words[1], 'letter': words[2], 'word': words[3],
                                   'comment': comment})
            elif kw == 'group':
                g = {'name': words[1] if len(words) > 1 else '', 'members': [], 'comment': comment,
                     **opts(words[2:])}
                if 'count' not in g:
                    raise DefError('%s:%d: group NAME count=COUNT' % (path, no))
                g['terms'] = g['count'].split('+')
                for t in g['terms']:
                    if not (t == 'kinds' or t.isdigit() or
                            any(a['name'] == t and a['type'] == 'int' for a in d['args'])):
                        raise DefError('%s:%d: group %s: count term "%s" is not kinds, a number '
                                       'or an int arg before it' % (path, no, g['name'], t))
                if g['name'] in ('at', 'size', 'n', 'm') or not re.match(r'^[a-z_][a-z0-9_]*$', g['name']):
                    raise DefError('%s:%d: group name "%s"' % (path, no, g['name']))
                d['groups'].append(g)
            elif kw == 'enum':
                enum = {'name': words[1], 'values': [], 'comment': comment, **opts(words[2:])}
                for k in ('c', 'prefix'):
                    if k not in enum:
                        raise DefError('%s:%d: enum %s needs %s=' % (path, no, words[1], k))
                d['enums'].append(enum)
            elif kw == 'value':
                if enum is None or len(words) != 4 or words[2] != '=':
                    raise DefError('%s:%d: value NAME = VALUE, after an enum' % (path, no))
                enum['values'].append({'name': words[1], 'value': words[3], 'comment': comment})
            elif kw == 'reply':
                if len(words) < 2 or words[1] not in ('array', 'integer'):
                    raise DefError('%s:%d: reply array|integer' % (path, no))
                reply = {'shape': words[1], 'comment': comment, 'fields': [], **opts(words[2:])}
                reply.setdefault('part', '')
                if reply['shape'] == 'integer':
                    reply['fields'].append({'name': 'value', 'type': 'int', 'comment': comment,
                                            'older': False, **opts(words[2:])})
                d['replies'].append(reply)
                older = False
            elif kw == 'rest':
                d['rest'] = ' '.join(words[1:]) or comment or 'the rest'
            elif kw == 'older':
                older = True
            elif kw == 'field':
                if len(words) < 3 or words[2] not in FIELD_TYPES:
                    raise DefError('%s:%d: field NAME TYPE (%s)' % (path, no, ', '.join(FIELD_TYPES)))
                if not d['replies'] or d['replies'][-1]['shape'] != 'array':
                    raise DefError('%s:%d: a field outside a reply array' % (path, no))
                d['replies'][-1]['fields'].append({'name': words[1], 'type': words[2],
                                                   'comment': comment, 'older': older,
                                                   **opts(words[3:])})
                older = False
            else:
                raise DefError('%s:%d: unknown "%s"' % (path, no, kw))
    if not d['name'] and (d['keys'] or d['kinds']):
        d['name'] = '_keys'  # the keys' table (keys.def): no script of its own
    if not d['name']:
        raise DefError('%s: no script line' % path)
    if (d['keys'] or d['kinds']) and d['name'] != '_keys':
        raise DefError('%s: key lines in a script\'s table' % path)
    for g in d['groups']:
        if not g['members']:
            raise DefError('%s: group %s has no arg' % (path, g['name']))
    if d['groups'] and d.get('rest'):
        raise DefError('%s: rest and group lines both' % path)
    for e in d['enums']:
        strings = [v['value'].startswith("'") for v in e['values']]
        if any(strings) and not all(strings):
            raise DefError('%s: enum %s mixes strings and numbers' % (path, e['name']))
        e['strings'] = bool(strings) and all(strings)
        # c=char: one-letter strings, C character constants; c=string: C string literals
        if e['c'] in ('char', 'string') and not e['strings']:
            raise DefError('%s: enum %s c=%s: its values are strings' % (path, e['name'], e['c']))
        if e['c'] == 'char' and any(len(v['value']) != 3 for v in e['values']):
            raise DefError('%s: enum %s c=char: one letter each' % (path, e['name']))
        if e['c'] in ('char', 'string') and any('"' in v['value'] or '\\' in v['value']
                                                  for v in e['values']):
            raise DefError('%s: enum %s: no quote or backslash' % (path, e['name']))
    return d


def upper(s):
    return re.sub(r'[^A-Za-z0-9]', '_', s).upper()


def c_comment(text):
    return ' /* %s */' % text.replace('*/', '* /') if text else ''


def field_ctype(f):
    # a string that names a constant is read as its index
    if f['type'] == 'str' and 'enum' in f:
        return 'long long'
    return FIELD_TYPES[f['type']][1]


def enum_of(d, name):
    for e in d['enums']:
        if e['name'] == name:
            return e
    raise DefError('%s: no enum %s' % (d['path'], name))


# ---- Lua ------------------------------------------------------------------------------------

def lua_arg(a, pos):
    v = 'ARGV[%d]' % pos
    t, default = a['type'], a.get('default')
    if t == 'int':
        v = 'tonumber(%s)' % v
    elif t == 'bool':
        return "%s == '1'" % v
    if default is not None:
        v = '%s or %s' % (v, default)
    return v


def positions(d, base_args):
    """Each argument's ARGV index (1-based): the next one, or that of the argument at= names (an
    operation's own arguments share the places after the common ones)."""
    pos, nxt = {}, base_args + 1
    for a in d['args']:
        if 'at' in a:
            if a['at'] not in pos:
                raise DefError('%s: arg %s at=%s: no such argument before it' % (
                    d['path'], a['name'], a['at']))
            pos[a['name']] = pos[a['at']]
        else:
            pos[a['name']] = nxt
            nxt += 1
    return pos


def lua_count(g):
    return ' + '.join('NKINDS' if t == 'kinds' else t if t.isdigit() else 'ARG.' + t
                      for t in g['terms'])


def lua_groups(d, first):
    """GROUP: where each group of arguments starts in ARGV (at), its members per repetition
    (size), how many repetitions the call's counts say (n), and each member's place in one (m);
    group_arg reads one."""
    out = ['-- The groups of arguments after those (lua/protocol/%s.def), in order: each one is n' % d['name'],
           '-- repetitions of its members; group_arg(g, i, name): member name of repetition i (from 0),',
           '-- as sent (nil: the call did not send it).',
           'local GROUP = {}']
    prev = None
    for g in d['groups']:
        at = str(first) if prev is None else 'GROUP.%s.at + GROUP.%s.size * GROUP.%s.n' % (prev, prev, prev)
        out.append('GROUP.%s = {at = %s, size = %d, n = %s, m = {%s}}%s' % (
            g['name'], at, len(g['members']), lua_count(g),
            ', '.join("['%s'] = %d" % (a['name'], i) for i, a in enumerate(g['members'])),
            ' -- ' + g['comment'] if g['comment'] else ''))
        prev = g['name']
    out.append('local function group_arg(g, i, name)')
    out.append('    return ARGV[g.at + i * g.size + g.m[name]]')
    out.append('end')
    return out


def lua_table(d):
    """The tables of the constants of d (its enums)."""
    out = []
    for e in d['enums']:
        if e.get('lua') == 'none':
            continue
        out.append('-- %s' % (e['comment'] or e['name']))
        out.append('local %s = {%s}' % (e.get('lua', upper(e['name'])), ', '.join(
            '%s = %s' % (v['name'], v['value']) for v in e['values'])))
    return out


def lua_keys_table(keys, kinds):
    """NK, KEY_NAMES, semaphore_keys(base), NKINDS and KIND_LETTER, from keys.def."""
    sent = [k for k in keys if k.get('sent', 'yes') == 'yes']
    derived = [k for k in keys if k.get('sent', 'yes') == 'no']
    out = ['-- The kinds of semaphore (lua/protocol/keys.def): KIND_LETTER[k], k from 0, in the order',
           '-- of the scripts that take both (their keys: the first kind\'s NK, then the next\'s).',
           'local NKINDS = %d' % len(kinds),
           'local KIND_LETTER = {%s}' % ', '.join("[%d] = '%s'" % (i, k['letter'])
                                                  for i, k in enumerate(kinds)),
           '-- The keys of one semaphore (lua/protocol/keys.def) a call sends, in the order every script',
           '-- takes them; the operator\'s (sent=no) are named from the first key\'s name instead.',
           'local NK = %d -- keys per semaphore in KEYS' % len(sent),
           '-- The names in a semaphore (s.NAME) of the keys in KEYS, in that order.',
           'local KEY_NAMES = {%s}' % ', '.join("'%s'" % k['lua'] for k in sent),
           '-- One semaphore\'s keys by name: KEYS[base + 1 .. base + NK], the others with the same',
           '-- "<prefix>{<pool>}:<kind letter>:", and its kind letter (one constructor: a field added',
           '-- after it would make Lua rehash the table at every call).',
           'local function semaphore_keys(base, kind)']
    if derived:
        out.append("    local at = string.sub(KEYS[base + 1], 1, -%d)" % (len(sent[0]['suffix']) + 1))
    out.extend(['    return {', '        kind = kind,'])
    for i, k in enumerate(sent):
        out.append('        %s = KEYS[base + %d],%s' % (k['lua'], i + 1,
                                                      ' -- ' + k['comment'] if k['comment'] else ''))
    for k in derived:
        out.append("        %s = at .. '%s',%s" % (k['lua'], k['suffix'],
                                                  ' -- ' + k['comment'] if k['comment'] else ''))
    out.append('    }')
    out.append('end')
    return out


def lua_prelude(d, base_args, keys=None):
    """The Lua a script's own text is preceded by (after _common.lua)."""
    name = d['name']
    out = ['-- Generated by tools/gen-protocol.py from lua/protocol/%s.def: do not edit.' % name]
    if name == '_common':
        if keys:
            out.extend(lua_keys_table(keys['keys'], keys['kinds']))
        out.extend(lua_table(d))
        # The common arguments, one local each (the names _common.lua's helpers use).
        for i, a in enumerate(d['args']):
            out.append('local %s = %s%s' % (a['lua'], lua_arg(a, i + 1),
                                            ' -- ' + a['comment'] if a['comment'] else ''))
        # Each script's reply() is unrolled (lua_reply): Redis runs a script's whole text at
        # every call, so a table of field specs built per reply cost an allocation per field.
        out.append('-- A reply field the script left out that has no default and that older scripts\'')
        out.append('-- replies had too: an error (a nil would cut the reply short).')
        out.append('local function reply_missing(script, name)')
        out.append("    error(script .. ': the reply has no ' .. name)")
        out.append('end')
        return '\n'.join(out) + '\n'
    if d['args']:
        out.append('-- The arguments after the common ones, by name.')
        pos = positions(d, base_args)
        out.append('local ARG = {')
        for a in d['args']:
            out.append('    %s = %s,%s' % (a['name'], lua_arg(a, pos[a['name']]),
                                           ' -- ' + a['comment'] if a['comment'] else ''))
        out.append('}')
        out.append('-- Their positions in ARGV (for what follows them, or their text as sent).')
        out.append('local ARGN = {%s}' % ', '.join(
            '%s = %d' % (a['name'], pos[a['name']]) for a in d['args']))
        if d.get('rest'):
            out.append('ARGN.rest = %d -- %s' % (max(pos.values()) + 1, d['rest']))
        if d['groups']:
            out.extend(lua_groups(d, max(pos.values()) + 1))
    out.extend(lua_table(d))
    for r in d['replies']:
        if r['shape'] != 'array':
            continue
        fn = 'reply' + ('_' + r['part'] if r['part'] else '')
        out.append('-- %s, from its fields by name (lua/protocol/%s.def).' % (
            'The reply' if not r['part'] else 'The reply\'s ' + r['part'], name))
        out.append('-- A field left out takes its default; one without a default ends the reply there')
        out.append('-- if an older script\'s reply ended before it, else is an error.')
        out.append('local function %s(r)' % fn)
        out.append('    local t, v = {}, nil')
        for i, f in enumerate(r['fields']):
            default = f.get('default')
            out.append('    v = r.%s' % f['name'])
            if default is not None:
                out.append('    if v == nil then v = %s end' % default)
            elif f['older']:
                out.append('    if v == nil then return t end')
            else:
                out.append("    if v == nil then reply_missing('%s.lua', '%s') end" % (name, f['name']))
            out.append('    t[%d] = v' % (i + 1))
        out.append('    return t')
        out.append('end')
    return '\n'.join(out) + '\n'


# ---- C --------------------------------------------------------------------------------------

def c_groups(d, N):
    """The groups of arguments after DBT_<S>_ARG_REST: their order (DBT_<S>_G_*), each one's
    members (DBT_<S>_<G>_<MEMBER>, DBT_<S>_<G>_SIZE), the arguments without the groups whose count
    an argument gives (DBT_<S>_NARGS_FIXED), and dbt_<s>_layout, where each group starts."""
    name = d['name']
    out = ['/* The groups of arguments after DBT_%s_ARG_REST, in order: each one is its count\'s' % N,
           ' * repetitions of its members (dbt_%s_layout says where each starts). */' % name,
           'enum {']
    for g in d['groups']:
        out.append('    DBT_%s_G_%s,%s' % (N, upper(g['name']), c_comment(g['comment'] + (
            ' (count: %s)' % g['count']))))
    out.append('    DBT_%s_NGROUPS' % N)
    out.append('};')
    for g in d['groups']:
        G = upper(g['name'])
        out.append('enum {')
        for a in g['members']:
            out.append('    DBT_%s_%s_%s,%s' % (N, G, upper(a['name']), c_comment(a['comment'])))
        out.append('    DBT_%s_%s_SIZE' % (N, G))
        out.append('};')

    def count(g, fixed_only):
        terms = []
        for t in g['terms']:
            if t == 'kinds':
                terms.append('DBT_NKINDS')
            elif t.isdigit():
                terms.append(t)
            elif fixed_only:
                return None
            else:
                terms.append('(int)n[DBT_%s_ARG_%s]' % (N, upper(t)))
        return ' + '.join(terms)
    fixed = ['DBT_%s_ARG_REST' % N]
    for g in d['groups']:
        c = count(g, True)
        if c is not None:
            fixed.append('DBT_%s_%s_SIZE * (%s)' % (N, upper(g['name']), c))
    out.append('/* The arguments of a call whose counts are all 0. */')
    out.append('#define DBT_%s_NARGS_FIXED (%s)' % (N, ' + '.join(fixed)))
    out.append('/* Where each group starts in args (at[DBT_%s_NGROUPS]: where the arguments end), for the' % N)
    out.append(' * counts a call sends (n: its arguments\' values, by their DBT_%s_ARG_* index). */' % N)
    out.append('static inline int dbt_%s_layout(const long long *n, int at[DBT_%s_NGROUPS + 1])' % (name, N))
    out.append('{')
    out.append('    (void)n;')
    out.append('    at[0] = DBT_%s_ARG_REST;' % N)
    for i, g in enumerate(d['groups']):
        out.append('    at[%d] = at[%d] + DBT_%s_%s_SIZE * (%s);' % (
            i + 1, i, N, upper(g['name']), count(g, False)))
    out.append('    return at[DBT_%s_NGROUPS];' % N)
    out.append('}')
    return out


def c_keys(table):
    keys, kinds = table['keys'], table['kinds']
    out = ['/* Generated by tools/gen-protocol.py from lua/protocol/keys.def: do not edit. */',
           '#ifndef DBT_KEYS_TABLE_H', '#define DBT_KEYS_TABLE_H', '',
           '/* The kinds of semaphore, in the order of the scripts that take both. */',
           'typedef enum {']
    for i, k in enumerate(kinds):
        out.append('    DBT_KIND_%s = %d,%s' % (k['c'], i, c_comment(k['comment'])))
    out.append('} dbt_kind;')
    out.append('#define DBT_NKINDS %d' % len(kinds))
    out.append('/* Their letters (in key names, and ARGV[2]: see lua/_common.lua) and words, in order. */')
    out.append('#define DBT_KIND_LETTERS {%s}' % ', '.join('"%s"' % k['letter'] for k in kinds))
    out.append('#define DBT_KIND_WORDS {%s}' % ', '.join('"%s"' % k['word'] for k in kinds))
    out.extend(['',
           '/* The keys of one semaphore, in the order the scripts take them (KEYS[base + 1 ..]). */',
           'enum {'])
    for k in keys:
        out.append('    DBT_K_%s,%s' % (k['c'], c_comment(k['comment'])))
    out.append('    DBT_NKEYS')
    out.append('};')
    out.append('/* How many of them a script call sends (KEYS), the first ones: the operator\'s come last and')
    out.append(' * are named by the scripts (keys.def, sent=no). */')
    out.append('#define DBT_NKEYS_SENT %d' % sum(1 for k in keys if k.get('sent', 'yes') == 'yes'))
    out.append('/* Each one\'s name after the semaphore\'s "<prefix>{<pool>}:<kind letter>", in that order. */')
    out.append('#define DBT_KEY_SUFFIXES {%s}' % ', '.join('":%s"' % k['suffix'] for k in keys))
    out.append('')
    out.append('#endif')
    return '\n'.join(out) + '\n'


def c_header(defs, base_args):
    out = ['/* Generated by tools/gen-protocol.py from lua/protocol/NAME.def: do not edit. */',
           '#ifndef DBT_PROTOCOL_H', '#define DBT_PROTOCOL_H', '',
           '#include "keys.h" /* DBT_NKINDS: a group of count=kinds */', '']
    for d in defs:
        name = d['name']
        N = upper(name)
        if name == '_keys':
            continue
        if name == '_common':
            out.append('/* ARGV[1..%d], the same for every script (lua/protocol/_common.def). */'
                       % len(d['args']))
            out.append('enum {')
            for a in d['args']:
                out.append('    DBT_ARG_%s,%s' % (upper(a['name']), c_comment(a['comment'])))
            out.append('    DBT_BASE_ARGS')
            out.append('};')
            for e in d['enums']:
                if e['c'] not in ('char', 'string'):
                    raise DefError('%s: enum %s: c=char or c=string here' % (d['path'], e['name']))
                if e['comment']:
                    out.append('/* %s */' % e['comment'])
                q = "'" if e['c'] == 'char' else '"'
                for v in e['values']:
                    out.append('#define %s%s %s%s%s%s' % (e['prefix'], v['name'], q,
                                                         v['value'].strip("'"), q,
                                                         c_comment(v['comment'])))
            out.append('')
            continue
        out.append('/* ---- %s.lua (lua/protocol/%s.def) ---- */' % (name, name))
        if d['args']:
            out.append('enum {')
            pos0 = positions(d, 0)
            for a in d['args']:
                out.append('    DBT_%s_ARG_%s = DBT_BASE_ARGS + %d,%s' % (
                    N, upper(a['name']), pos0[a['name']] - 1, c_comment(a['comment'])))
            # after an at= argument the next would follow it: the count is given its place
            last = max(positions(d, 0).values())
            if d.get('rest'):
                out.append('    DBT_%s_ARG_REST = DBT_BASE_ARGS + %d, /* %s */' % (N, last, d['rest']))
            elif d['groups']:
                out.append('    DBT_%s_ARG_REST = DBT_BASE_ARGS + %d, /* the groups (below) */' % (N, last))
            else:
                out.append('    DBT_%s_NARGS = DBT_BASE_ARGS + %d' % (N, last))
            out.append('};')
            if d['groups']:
                out.extend(c_groups(d, N))
        for e in d['enums']:
            if e['comment']:
                out.append('/* %s */' % e['comment'])
            if e['c'] in ('char', 'string'):
                q = "'" if e['c'] == 'char' else '"'
                for v in e['values']:
                    out.append('#define %s%s %s%s%s%s' % (e['prefix'], v['name'], q,
                                                         v['value'].strip("'"), q,
                                                         c_comment(v['comment'])))
                continue
            out.append('typedef enum {')
            for i, v in enumerate(e['values']):
                val = '' if e['strings'] else ' = %s' % v['value']
                out.append('    %s%s%s,%s' % (e['prefix'], v['name'], val, c_comment(v['comment'])))
            out.append('} %s;' % e['c'])
        for r in d['replies']:
            if r['shape'] != 'array':
                continue
            P = N + ('_' + upper(r['part']) if r['part'] else '')
            out.append('enum {')
            for f in r['fields']:
                out.append('    DBT_%s_R_%s,' % (P, upper(f['name'])))
            out.append('    DBT_%s_NREPLY' % P)
            out.append('};')
        out.append('')
    out.append('#endif')
    return '\n'.join(out) + '\n'


def c_fields(defs):
    out = ['/* Generated by tools/gen-protocol.py from lua/protocol/NAME.def: do not edit.',
           ' * Included by script_protocol.c alone: each reply\'s fields, as its reader reads them. */']
    for d in defs:
        name = d['name']
        used = {f['enum'] for r in d['replies'] for f in r['fields'] if 'enum' in f}
        for e in d['enums']:
            if e['c'] in ('char', 'string'):
                continue
            if e['strings']:
                out.append('static const char *const %s_names[] = {%s};' % (
                    e['c'], ', '.join('"%s"' % v['value'].strip("'") for v in e['values'])))
            elif e['name'] not in used:
                continue
            else:
                out.append('static const long long %s_values[] = {%s};' % (
                    e['c'], ', '.join(v['value'] for v in e['values'])))
        for r in d['replies']:
            ident = name + ('_' + r['part'] if r['part'] else '')
            out.append('/* %s.lua\'s reply%s: %s. */' % (
                name, '\'s ' + r['part'] if r['part'] else '', r['comment'] or r['shape']))
            out.append('typedef struct {')
            out.append('    size_t n; /* the fields the reply has (a script before the last ones) */')
            for f in r['fields']:
                ctype = field_ctype(f)
                star = ctype.endswith('*')
                suffix = '[DBT_NKINDS]' if f['type'].endswith('[kinds]') else ''
                out.append('    %s%s%s%s;%s' % (ctype, '' if star else ' ', f['name'], suffix,
                                               c_comment(f['comment'])))
            out.append('} %s_fields;' % ident)
            out.append('static const dbt_field_spec %s_spec[] = {' % ident)
            for f in r['fields']:
                ft, _ = FIELD_TYPES[f['type']]
                allowed = 'NULL, NULL, 0'
                if 'enum' in f:
                    e = enum_of(d, f['enum'])
                    if e['strings']:
                        allowed = 'NULL, %s_names, %d' % (e['c'], len(e['values']))
                    else:
                        allowed = '%s_values, NULL, %d' % (e['c'], len(e['values']))
                out.append('    {"%s", %s, offsetof(%s_fields, %s), %s, %s},' % (
                    f['name'].replace('_', ' '), ft, ident, f['name'],
                    'true' if f['older'] else 'false', allowed))
            out.append('};')
    return '\n'.join(out) + '\n'


def write_if_changed(path, text):
    try:
        with open(path, encoding='utf-8') as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        pass
    tmp = path + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv):
    if len(argv) < 3:
        sys.stderr.write('usage: gen-protocol.py OUTDIR DEF...\n')
        return 2
    out = argv[1]
    try:
        defs = [parse(p) for p in argv[2:]]
        common = [d for d in defs if d['name'] == '_common']
        if len(common) != 1:
            raise DefError('no lua/protocol/_common.def')
        base_args = len(common[0]['args'])
        keys = [d for d in defs if d['name'] == '_keys']
        if len(keys) != 1 or not keys[0]['kinds'] or not keys[0]['keys']:
            raise DefError('no lua/protocol/keys.def (with its kinds and keys)')
        keys = keys[0]
        defs = [d for d in defs if d['name'] != '_keys']
        defs.sort(key=lambda d: (d['name'] != '_common', d['name']))
        os.makedirs(os.path.join(out, 'lua'), exist_ok=True)
        write_if_changed(os.path.join(out, 'protocol.h'), c_header(defs, base_args))
        write_if_changed(os.path.join(out, 'protocol_fields.inc'), c_fields(defs))
        write_if_changed(os.path.join(out, 'keys_table.h'), c_keys(keys))
        for d in defs:
            write_if_changed(os.path.join(out, 'lua', d['name'] + '.lua'),
                             lua_prelude(d, base_args, keys))
    except DefError as e:
        sys.stderr.write('gen-protocol.py: %s\n' % e)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))

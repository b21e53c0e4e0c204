/**
 * How `@Exclusive` finds a call's target key: the door a method is reached through (`doorOf`), where each placeholder
 * of its key template comes from (`argumentPlan`, `sourceOf`): decided by the signature, once per method (see
 * call-plan.ts, which reads the values of each call).
 */
import 'reflect-metadata';
import {
  CUSTOM_ROUTE_ARGS_METADATA,
  METHOD_METADATA,
  PATH_METADATA,
  ROUTE_ARGS_METADATA,
} from '@nestjs/common/constants.js';
import { LeaseConfigError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';

/**
 * How a decorated method is reached: an HTTP route, a WebSocket message, a microservice pattern, a GraphQL resolver
 * (query, mutation, subscription, field), or a plain call.
 */
export type Door = 'http' | 'ws' | 'rpc' | 'graphql' | 'provider';

// Metadata keys of @nestjs/websockets, @nestjs/microservices and @nestjs/graphql (optional packages, not imported).
const WS_MESSAGE_MAPPING_METADATA = 'websockets:message_mapping';
const RPC_PATTERN_METADATA = 'microservices:pattern';
const GRAPHQL_RESOLVER_TYPE_METADATA = 'graphql:resolver_type';

/** Read from the (wrapped) method's own metadata: what Nest's route, gateway and microservice explorers look for. */
export function doorOf(method: object): Door {
  if (Reflect.getMetadata(WS_MESSAGE_MAPPING_METADATA, method)) return 'ws';
  if (Reflect.getMetadata(RPC_PATTERN_METADATA, method) !== undefined) return 'rpc';
  if (Reflect.getMetadata(GRAPHQL_RESOLVER_TYPE_METADATA, method) !== undefined) return 'graphql';
  if (
    Reflect.getMetadata(METHOD_METADATA, method) !== undefined &&
    Reflect.getMetadata(PATH_METADATA, method) !== undefined
  ) {
    return 'http';
  }
  return 'provider';
}

/** One argument a placeholder can read: named by a parameter decorator, or a whole object of fields. */
interface ArgumentSource {
  readonly index: number;
  /** How the signature declares it, for messages: `@Param('id')`, `@Body()`. */
  readonly label: string;
}

/**
 * Where each placeholder of a handler's key comes from: decided by the handler's signature, once, never by what a
 * request happens to contain.
 */
export interface ArgumentPlan {
  readonly door: Door;
  /** `Class.method`, for messages. */
  readonly label: string;
  /**
   * `@Param('id')`, `@Body('id')`, `@Query('id')`, `@Headers('id')`, `@MessageBody('id')`, `@Payload('id')`,
   * `@Args('id')` → id.
   */
  readonly named: ReadonlyMap<string, readonly ArgumentSource[]>;
  /** Whole-object arguments whose fields a placeholder names, in order of precedence. */
  readonly wholes: readonly ArgumentSource[];
  /** Arguments a positional placeholder (`{0}`) may name. */
  readonly positions: ReadonlySet<number> | 'any';
  /** Where `@CurrentLease()` wants the lease. */
  readonly leaseSlots: readonly number[];
}

// Paramtypes of @nestjs/common (RouteParamtypes), of the ws / rpc packages (payload = 3 in both) and of
// @nestjs/graphql (GqlParamtype: args = 3, root = 0).
const HTTP_SOURCES: Record<number, string> = { 5: '@Param', 3: '@Body', 4: '@Query', 6: '@Headers' };
const DATA_SOURCES: Record<Exclude<Door, 'http' | 'provider'>, Record<number, string>> = {
  ws: { 3: '@MessageBody' },
  rpc: { 3: '@Payload' },
  graphql: { 3: '@Args' },
};
/** GraphQL: after the whole arguments (`@Args()`), a placeholder may read fields of the parent (`@Parent()`). */
const GRAPHQL_WHOLES: Record<number, string> = { 0: '@Parent()' };
/** The whole objects a placeholder may read fields of: route params before the body; never the whole query. */
const HTTP_WHOLES = [5, 3];

interface RouteArgument {
  index: number;
  data?: unknown;
  factory?: unknown;
}

/**
 * Reads Nest's parameter metadata (`ROUTE_ARGS_METADATA`, which `@Param`, `@Body`, `@MessageBody`, `@Payload` and
 * custom parameter decorators write on the class for the method) into an argument plan.
 */
export function argumentPlan(
  owner: Function,
  methodName: string | symbol,
  door: Door,
  leaseFactory: unknown,
): ArgumentPlan {
  const label = `${owner.name}.${String(methodName)}`;
  const routeArgs = Reflect.getMetadata(ROUTE_ARGS_METADATA, owner, methodName) as
    Record<string, RouteArgument> | undefined;
  const named = new Map<string, ArgumentSource[]>();
  const wholes: Array<ArgumentSource & { rank: number }> = [];
  const positions = new Set<number>();
  const leaseSlots: number[] = [];
  if (door === 'provider')
    return { door, label, named, wholes: [{ index: 0, label: 'the first argument' }], positions: 'any', leaseSlots };
  for (const [key, argument] of Object.entries(routeArgs ?? {})) {
    if (key.includes(CUSTOM_ROUTE_ARGS_METADATA)) {
      if (argument.factory === leaseFactory) leaseSlots.push(argument.index);
      else positions.add(argument.index);
      continue;
    }
    positions.add(argument.index);
    const paramtype = Number(key.split(':')[0]);
    const decorator = door === 'http' ? HTTP_SOURCES[paramtype] : DATA_SOURCES[door][paramtype];
    if (!decorator) {
      if (door === 'graphql' && argument.data === undefined && GRAPHQL_WHOLES[paramtype] !== undefined) {
        wholes.push({ index: argument.index, label: GRAPHQL_WHOLES[paramtype], rank: 1 });
      }
      continue;
    }
    if (typeof argument.data === 'string') {
      named.set(argument.data, [
        ...(named.get(argument.data) ?? []),
        { index: argument.index, label: `${decorator}('${argument.data}')` },
      ]);
    } else if (argument.data === undefined && (door !== 'http' || HTTP_WHOLES.includes(paramtype))) {
      wholes.push({
        index: argument.index,
        label: `${decorator}()`,
        rank: door === 'http' ? HTTP_WHOLES.indexOf(paramtype) : 0,
      });
    }
  }
  if (!routeArgs) {
    // Without parameter decorators Nest passes (socket, data, ack) to a gateway and (data, context) to a microservice.
    if (door === 'ws' || door === 'rpc') {
      wholes.push({ index: door === 'ws' ? 1 : 0, label: 'the message data', rank: 0 });
      positions.add(0).add(1);
    }
    // A resolver without parameter decorators gets (parent, args, context, info).
    if (door === 'graphql') {
      wholes.push({ index: 1, label: 'the arguments', rank: 0 });
      positions.add(0).add(1).add(2).add(3);
    }
  }
  wholes.sort((a, b) => a.rank - b.rank);
  return { door, label, named, wholes, positions, leaseSlots };
}

/** Where one placeholder reads: an argument (a field of it with `path`), or the first whole object that has the field. */
export type PlaceholderSource =
  | { readonly index: number; readonly path?: string }
  | { readonly wholes: readonly ArgumentSource[]; readonly path: string };

/**
 * The argument a placeholder reads, by the rule docs/exclusive.md documents ("Keys"): `{0}` by position; a
 * name one parameter decorator declares; else a field of the whole-object arguments. Throws `LeaseConfigError` for
 * a placeholder the signature cannot fill.
 */
export function sourceOf(plan: ArgumentPlan, name: string): PlaceholderSource {
  const [head, ...rest] = name.split('.');
  const path = rest.length > 0 ? rest.join('.') : undefined;
  if (/^\d+$/.test(head)) {
    const index = Number(head);
    if (plan.positions !== 'any' && !plan.positions.has(index)) {
      throw new LeaseConfigError(messages.placeholderPositionUndeclared(plan.label, name, index));
    }
    return { index, path };
  }
  const declared = plan.named.get(head) ?? [];
  if (declared.length > 1) {
    const sources = declared.map((source) => `${source.label} (argument ${source.index})`).join(' and ');
    throw new LeaseConfigError(messages.placeholderAmbiguous(plan.label, name, sources));
  }
  if (declared.length === 1) return { index: declared[0].index, path };
  if (plan.wholes.length > 0) return { wholes: plan.wholes, path: name };
  const alternatives =
    plan.door === 'http'
      ? `@Param('${head}') (a route parameter), @Body('${head}') (a body field), @Query('${head}') (a query value), ` +
        'or @Body() for fields of the body'
      : plan.door === 'graphql'
        ? `@Args('${head}'), or the whole arguments with @Args()`
        : plan.door === 'ws'
          ? `@MessageBody('${head}'), or the whole data with @MessageBody()`
          : `@Payload('${head}'), or the whole data with @Payload()`;
  throw new LeaseConfigError(messages.placeholderUndeclared(plan.label, name, alternatives));
}

// The official A2A JavaScript SDK's server, as the benchmarks' peer: one node
// process, express, the SDK's DefaultRequestHandler on its InMemoryTaskStore,
// JSON-RPC at / and HTTP+JSON at /rest, and an echo agent that runs in this
// process (an artifact echoing the text, then completed), as its README shows.
//
//   node bench/js/peer.mjs PORT      (prints "listening PORT" once it serves)
import express from 'express';
import { AgentEvent, DefaultRequestHandler } from '@a2a-js/sdk/server';
import { InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, restHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { TaskState } from '@a2a-js/sdk';

const port = Number(process.argv[2] || 0);
const url = `http://127.0.0.1:${port}`;

const card = {
  name: 'echo',
  description: 'echoes the text it is sent',
  supportedInterfaces: [
    { url: `${url}/`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' },
    { url: `${url}/rest`, protocolBinding: 'HTTP+JSON', tenant: '', protocolVersion: '1.0' },
  ],
  provider: undefined,
  version: '1.0.0',
  capabilities: { streaming: true, pushNotifications: false },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ['text/plain'],
  defaultOutputModes: ['text/plain'],
  skills: [{ id: 'echo', name: 'echo', description: 'echo', tags: ['echo'], examples: [],
             inputModes: [], outputModes: [], securityRequirements: [] }],
  signatures: [],
};

const now = () => new Date().toISOString();
const status = (state) => ({ state, message: undefined, timestamp: now() });

class Echo {
  async execute(context, bus) {
    const { taskId, contextId } = context;
    const text = context.userMessage.parts
      .map((part) => (part.content && part.content.$case === 'text' ? part.content.value : ''))
      .join('');
    bus.publish(AgentEvent.task({
      id: taskId, contextId, status: status(TaskState.TASK_STATE_SUBMITTED),
      artifacts: [], history: [context.userMessage], metadata: undefined,
    }));
    bus.publish(AgentEvent.artifactUpdate({
      taskId, contextId, append: false, lastChunk: true, metadata: undefined,
      artifact: {
        artifactId: `${taskId}-echo`, name: 'echo', description: '', metadata: undefined,
        extensions: [], parts: [{ content: { $case: 'text', value: text } }],
      },
    }));
    bus.publish(AgentEvent.statusUpdate({
      taskId, contextId, status: status(TaskState.TASK_STATE_COMPLETED), metadata: undefined,
    }));
    bus.finished();
  }

  async cancelTask(taskId, bus) {
    bus.finished();
  }
}

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new Echo());
const app = express();
const options = { requestHandler: handler, userBuilder: UserBuilder.noAuthentication };
app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
app.use('/rest', restHandler(options));
app.use('/', jsonRpcHandler(options));
const server = app.listen(port, '127.0.0.1', () => {
  console.log(`listening ${server.address().port}`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));

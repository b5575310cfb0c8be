//! The names clawboard's spans and metrics use: OpenTelemetry's GenAI semantic
//! conventions, and clawboard's own under `clawboard.`.
//!
//! Followed: the GenAI conventions as of `open-telemetry/semantic-conventions-genai`
//! at its state of 2026-11 (development stability, untagged), which carried on
//! semantic-conventions v1.37's `gen_ai.*` names. The semconv crate does not carry
//! these names, so they are written here, once.

/// The convention version the spans say they follow (`schema_url` of the scope).
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.37.0";

// Operations (`gen_ai.operation.name`) and the span names they start.
pub const OP_INVOKE_WORKFLOW: &str = "invoke_workflow";
pub const OP_INVOKE_AGENT: &str = "invoke_agent";
pub const OP_CHAT: &str = "chat";
pub const OP_EXECUTE_TOOL: &str = "execute_tool";

// GenAI attributes.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
pub const GEN_AI_WORKFLOW_NAME: &str = "gen_ai.workflow.name";
pub const GEN_AI_AGENT_NAME: &str = "gen_ai.agent.name";
pub const GEN_AI_AGENT_ID: &str = "gen_ai.agent.id";
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
pub const GEN_AI_REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
pub const GEN_AI_REQUEST_TEMPERATURE: &str = "gen_ai.request.temperature";
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
pub const GEN_AI_RESPONSE_ID: &str = "gen_ai.response.id";
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
pub const GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
pub const GEN_AI_INPUT_MESSAGES: &str = "gen_ai.input.messages";
pub const GEN_AI_OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
pub const GEN_AI_TOKEN_TYPE: &str = "gen_ai.token.type";
pub const ERROR_TYPE: &str = "error.type";
pub const SERVER_ADDRESS: &str = "server.address";
pub const SERVER_PORT: &str = "server.port";

// OpenInference's span kind, which Phoenix (and Arize) read to type a span; it
// is derived from `gen_ai.operation.name` when a span is encoded.
pub const OPENINFERENCE_SPAN_KIND: &str = "openinference.span.kind";

/// The OpenInference span kind of a GenAI operation, if it has one.
pub fn openinference_kind(operation: &str) -> Option<&'static str> {
    match operation {
        OP_INVOKE_WORKFLOW => Some("CHAIN"),
        OP_INVOKE_AGENT => Some("AGENT"),
        OP_CHAT => Some("LLM"),
        OP_EXECUTE_TOOL => Some("TOOL"),
        _ => None,
    }
}

// GenAI metrics (as Prometheus names on `/metrics`: dots become underscores).
pub const METRIC_TOKEN_USAGE: &str = "gen_ai_client_token_usage";
pub const METRIC_OPERATION_DURATION: &str = "gen_ai_client_operation_duration_seconds";

// clawboard's own.
pub const CLAWBOARD_TASK_ID: &str = "clawboard.task.id";
pub const CLAWBOARD_TASK_TYPE: &str = "clawboard.task.type";
pub const CLAWBOARD_TASK_STATUS: &str = "clawboard.task.status";
pub const CLAWBOARD_NODE: &str = "clawboard.node";
pub const CLAWBOARD_STEP: &str = "clawboard.step.id";
pub const CLAWBOARD_ATTEMPT: &str = "clawboard.attempt";
pub const CLAWBOARD_INSTANCE: &str = "clawboard.instance.id";
pub const CLAWBOARD_ATTEMPT_STATUS: &str = "clawboard.attempt.status";
pub const CLAWBOARD_RETRY: &str = "clawboard.retry";
pub const CLAWBOARD_RETRY_CAUSE: &str = "clawboard.retry.cause";
pub const CLAWBOARD_FALLBACK_FROM: &str = "clawboard.fallback.from";
pub const CLAWBOARD_REPLAYED: &str = "clawboard.replayed";
pub const CLAWBOARD_SLICE_TOKENS: &str = "clawboard.slice.tokens";
pub const CLAWBOARD_SLICE_MODEL_TOKENS: &str = "clawboard.slice.model_tokens";
pub const CLAWBOARD_SLICE_HASH: &str = "clawboard.slice.hash";
pub const CLAWBOARD_BUDGET: &str = "clawboard.slice.budget";
pub const CLAWBOARD_RUNGS: &str = "clawboard.slice.rungs";
pub const CLAWBOARD_BOARD_TOKENS: &str = "clawboard.board.tokens";
pub const CLAWBOARD_BOARD_SEQ: &str = "clawboard.board.seq";
pub const CLAWBOARD_BOARD_WRITES: &str = "clawboard.board.writes";
pub const CLAWBOARD_ESCALATIONS: &str = "clawboard.escalation.ids";
pub const CLAWBOARD_CONTRACT_STATUS: &str = "clawboard.contract.status";
pub const CLAWBOARD_CLAIM_FROM: &str = "clawboard.claim.from";
pub const CLAWBOARD_CLAIM_GENERATION: &str = "clawboard.claim.generation";
pub const CLAWBOARD_INTERRUPTED: &str = "clawboard.resume.interrupted";
pub const CLAWBOARD_LINK_RELATION: &str = "clawboard.link.relation";
pub const CLAWBOARD_TOTAL_INPUT_TOKENS: &str = "clawboard.usage.input_tokens";
pub const CLAWBOARD_TOTAL_OUTPUT_TOKENS: &str = "clawboard.usage.output_tokens";
